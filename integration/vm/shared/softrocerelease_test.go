package shared

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// softRoCEIPAM is host-local's folder of the softroce scenario's leases
// (softRoCEEntry), one file per address under the network's name.
const softRoCEIPAM = "/run/ipam-softroce/rdmanet"

// softRoCEReleased checks that the operator commands give back a
// podSoftRoCE attachment whose pod went without a DEL, as the runtime
// never calls one after a crash: a pod's netns deleted behind the
// plugin's back, `reconcile --once` releases its record and leases (its
// rxe device went with its netns's child, which the pass proves from the
// host's listing); another pod's likewise, by `uninstall`, which then
// takes the entry out of the conflist, as no attachment is left.
func softRoCEReleased(t *testing.T, c *guestkit.Calls) {
	conf := filepath.Join(c.DataDir, "softroce.conflist")
	if err := os.WriteFile(conf, c.List.Bytes, 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		args []string
	}{
		{"reconcile", []string{"reconcile", "--conflist", conf, "--cni-bin-dir", guestkit.BinDir, "--once"}},
		{"uninstall", []string{"uninstall", "--conflist", conf, "--wait", "60s"}},
	}
	for _, s := range steps {
		p := guestkit.NewPod("softroce-", "sr-"+s.name)
		dev := rdma.SoftRoCEName("rdmanet", p.ContainerID, "eth0")
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			t.Fatalf("no pod for %s: it cannot run", s.name)
		}
		var leases []string
		for _, prefix := range []string{"fd00:78::", "192.168.78."} {
			a, err := guestkit.PodAddr(p.NetNS, "rdma0", prefix)
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, filepath.Join(softRoCEIPAM, a))
		}
		guestkit.Check(t, s.name+"-leases-taken", func() error { return filesAre(leases, true) })
		guestkit.DelNetNS(t, p)
		run := guestkit.RunOps(t, s.name, nil, s.args...)
		guestkit.Check(t, s.name+"-exit", func() error { return run.Exit(0) })
		guestkit.Check(t, s.name+"-released", func() error {
			if !strings.Contains(run.Output(), "released an attachment") {
				return errors.New("no attachment released")
			}
			return nil
		})
		guestkit.Check(t, s.name+"-no-record", func() error { return c.RecordCount(0) })
		guestkit.Check(t, s.name+"-no-lease", func() error { return filesAre(leases, false) })
		guestkit.Check(t, s.name+"-no-rxe", func() error { return gone(dev) })
	}
	guestkit.Check(t, "uninstall-entry-out", func() error {
		b, err := os.ReadFile(conf)
		if err == nil && strings.Contains(string(b), `"rdma-chain"`) {
			err = fmt.Errorf("%s after uninstall: %s", conf, b)
		}
		return err
	})
}

// noLeases checks that host-local holds no lease in softRoCEIPAM: no
// file named as an address (beside them are its lock and its cursor).
func noLeases() error {
	es, err := os.ReadDir(softRoCEIPAM)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range es {
		if _, perr := netip.ParseAddr(e.Name()); perr == nil {
			err = errors.Join(err, fmt.Errorf("lease %s left in %s", e.Name(), softRoCEIPAM))
		}
	}
	return err
}

// filesAre checks that every path exists (want) or none does.
func filesAre(paths []string, want bool) error {
	for _, p := range paths {
		_, err := os.Stat(p)
		switch {
		case want && err != nil:
			return err
		case !want && err == nil:
			return fmt.Errorf("%s is still there", p)
		case !want && !errors.Is(err, os.ErrNotExist):
			return err
		}
	}
	return nil
}
