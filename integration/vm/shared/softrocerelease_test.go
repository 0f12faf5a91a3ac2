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

// softRoCEIPAM is host-local's dataDir in softRoCEEntry; its leases are
// files named as their addresses under the network's name.
const softRoCEIPAM = "/run/ipam-softroce"

// softRoCEReleased checks that the operator commands give back a
// podSoftRoCE attachment whose pod went without a DEL, as after a
// runtime's crash: a pod's netns deleted behind the plugin's back,
// `reconcile --once` releases its record and leases; another pod's
// likewise, by `uninstall`, which then takes the entry out of the
// conflist, as no attachment is left. The rxe device went with its
// netns's child, so its check only confirms what the pass read. The
// primary's DEL then gives back its lease, as the runtime's would: left,
// a later GC in this boot (crash-softroce's) would release it and see a
// change to the node.
func softRoCEReleased(t *testing.T, c *guestkit.Calls) {
	conf := filepath.Join(t.TempDir(), "softroce.conflist")
	if !guestkit.Check(t, "release-conflist", func() error { return os.WriteFile(conf, c.List.Bytes, 0o600) }) {
		return
	}
	primary, err := guestkit.Only(c.List, "ptp")
	if err != nil {
		t.Fatalf("the primary's conflist: %v", err)
	}
	for _, s := range []struct {
		name string
		args []string
	}{
		{"reconcile", []string{"reconcile", "--conflist", conf, "--cni-bin-dir", guestkit.BinDir, "--once"}},
		{"uninstall", []string{"uninstall", "--conflist", conf, "--wait", "60s"}},
	} {
		p := guestkit.NewPod("softroce-", "sr-"+s.name)
		dev := rdma.SoftRoCEName("rdmanet", p.ContainerID, "eth0")
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			_ = c.Gone(t, p) // what the failed ADD left must not reach the next scenario
			return
		}
		var addrs []string
		ok := guestkit.Check(t, s.name+"-leases-taken", func() error {
			for _, prefix := range []string{"fd00:78::", "192.168.78."} {
				a, err := guestkit.PodAddr(p.NetNS, "rdma0", prefix)
				if err != nil {
					return err
				}
				if guestkit.LeaseGone(softRoCEIPAM, a) == nil {
					return fmt.Errorf("no lease of %s in %s", a, softRoCEIPAM)
				}
				addrs = append(addrs, a)
			}
			return nil
		})
		if !ok {
			_ = c.Gone(t, p)
			return
		}
		guestkit.DelNetNS(t, p)
		run := guestkit.RunOps(t, s.name, nil, s.args...)
		guestkit.Check(t, s.name+"-exit", func() error { return run.Exit(0) })
		guestkit.Check(t, s.name+"-released", func() error {
			r, err := guestkit.FindRecord(guestkit.LogRecords(run.Output()), "released an attachment", nil)
			switch {
			case err != nil:
				return err
			case !strings.Contains(r["attachment"], " macvlan "+dev+" as rdma0)"):
				return fmt.Errorf("released %q, want %s's attachment with %s", r["attachment"], p.Name, dev)
			case r["why"] != "netns "+p.NetNS+" is gone":
				return fmt.Errorf("released because %q", r["why"])
			}
			return nil
		})
		guestkit.Check(t, s.name+"-no-record", func() error { return c.RecordCount(0) })
		guestkit.Check(t, s.name+"-no-lease", func() error {
			return errors.Join(guestkit.LeaseGone(softRoCEIPAM, addrs[0]), guestkit.LeaseGone(softRoCEIPAM, addrs[1]))
		})
		guestkit.Check(t, s.name+"-no-rxe", func() error { return gone(dev) })
		guestkit.ExpectOK(t, s.name+"-primary-del", c.Logged(t, "DEL primary", p, c.C.Del(primary, p)))
	}
	guestkit.Check(t, "uninstall-entry-out", func() error {
		b, err := os.ReadFile(conf)
		if err == nil && strings.Contains(string(b), `"rdma-chain"`) {
			err = fmt.Errorf("%s after uninstall: %s", conf, b)
		}
		return err
	})
}

// noLeases checks that host-local holds no lease of the network rdmanet
// in softRoCEIPAM: no file named as an address (beside them are its lock
// and its cursor).
func noLeases() error {
	dir := filepath.Join(softRoCEIPAM, "rdmanet")
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range es {
		if _, perr := netip.ParseAddr(e.Name()); perr == nil {
			err = errors.Join(err, fmt.Errorf("lease %s left in %s", e.Name(), dir))
		}
	}
	return err
}
