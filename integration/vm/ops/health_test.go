package ops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	healthLog = "/run/reconcile-health.log"
	rxeNetdev = "veth0" // guestkit.SetUpRxe's rxe0 is on it
)

// TestOpsHealth (scenario ops-health, in the ops boot): NIC health from
// `reconcile --interval --metrics-bind-address` on soft-RoCE. The scrape
// gives rxe0 port 1's GID table as sysfs has it when read here, a rate,
// the port ACTIVE and the device present; rxe0's netdev set down flips
// the port's state in the scrape to DOWN, and set up back to ACTIVE.
func TestOpsHealth(t *testing.T) {
	testenv.VMGuest(t)
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("rxe0 could not be set up: no case runs")
	}
	c := guestkit.NewCalls(t, "1.0.0", opsDataDir)
	if !writeConflist(t, c, opsConf, []byte(opsConflist)) {
		t.Fatal("no conflist: no case runs")
	}
	d := healthDaemon(t)
	gidHealth(t)
	portDownUp(t)
	guestkit.Check(t, "health-reconcile-stops", func() error { return d.Stop(10 * time.Second) })
}

// healthDaemon starts `reconcile --interval 10m --metrics-bind-address`
// on the scenario's conflist (no hold of the SMC socket hook: the
// scenario's pods load it themselves) and waits for its metrics.
func healthDaemon(t *testing.T) *guestkit.OpsDaemon {
	d, err := guestkit.StartOps(t, healthLog, nil, "reconcile", "--conflist", opsConf, "--cni-bin-dir", cniBinDir,
		"--interval", "10m", "--hold-smc-hook=false", "--metrics-bind-address", metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	guestkit.Check(t, "health-metrics-served", func() error {
		// The first collection probes the SMC offer (the hook binary
		// parses the kernel's BTF): under TCG on a busy host it outlasts
		// the handler's 20 s (503) once.
		err := guestkit.Poll(90*time.Second, 100*time.Millisecond, func() error {
			_, err := guestkit.ScrapeMetrics(metricsURL)
			return err
		})
		if err != nil {
			err = fmt.Errorf("no metrics: %w; reconcile's log: %s", err, d.Log())
		}
		return err
	})
	return d
}

// gidHealth checks that a scrape gives rxe0 port 1's GID table as sysfs
// has it when read here (rows, and rows other than the zero GID: at
// least veth0's link-local address as RoCE v1 and v2; 6.12 shows 2 of
// 1,024), its rate, the port ACTIVE, the device present and no collect
// error of rdma.
func gidHealth(t *testing.T) {
	var s guestkit.Scrape
	var used, size int
	port := map[string]string{"device": "rxe0", "port": "1"}
	err := guestkit.Poll(15*time.Second, 300*time.Millisecond, func() (err error) {
		if s, err = freshScrape("rdma_chain_rdma_port_gids_used", port); err != nil {
			return err
		}
		if used, size, err = sysfsGIDs("rxe0", 1); err != nil {
			return err
		}
		// The scrape may answer from a collection up to 2 s old.
		return errors.Join(s.Want("rdma_chain_rdma_port_gids_used", port, float64(used)),
			s.Want("rdma_chain_rdma_port_gids_size", port, float64(size)))
	})
	logScrape(t, "scrape-health", s, nil)
	t.Logf("gid-table kernel=%s: rxe0 port 1 uses %d of %d rows", rdma.KernelRelease(), used, size)
	guestkit.Check(t, "metrics-gid-table", func() error {
		switch {
		case err != nil:
			return err
		case used < 2 || size < used:
			return fmt.Errorf("rxe0 port 1 uses %d of %d GID rows; want at least veth0's 2", used, size)
		}
		return nil
	})
	guestkit.Check(t, "metrics-port-health", func() error {
		errs := []error{s.Want("rdma_chain_rdma_port_info", map[string]string{"device": "rxe0", "port": "1", "state": "ACTIVE"}, 1),
			s.Want("rdma_chain_rdma_device_present", map[string]string{"device": "rxe0"}, 1),
			s.Want("rdma_chain_collect_errors", map[string]string{"source": "rdma"}, 0)}
		if r := s.Find("rdma_chain_rdma_port_rate_bytes_per_second", port); len(r) != 1 || r[0].Value <= 0 {
			errs = append(errs, fmt.Errorf("rxe0 port 1's rate %v, want one sample above 0", r))
		}
		return errors.Join(errs...)
	})
}

// sysfsGIDs counts port's GID rows of dev and those not the zero GID,
// reading sysfs here.
func sysfsGIDs(dev string, port int) (used, size int, err error) {
	dir := fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/gids", dev, port)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return 0, 0, err
		}
		if strings.TrimSpace(string(b)) != "0000:0000:0000:0000:0000:0000:0000:0000" {
			used++
		}
	}
	return used, len(entries), nil
}

// portDownUp checks that rxe0's netdev set down flips rxe0 port 1's
// state in the metrics from ACTIVE to DOWN, and set up again back to
// ACTIVE.
func portDownUp(t *testing.T) {
	for _, step := range []struct {
		name, state string
		set         func(netlink.Link) error
	}{{"metrics-port-down", "DOWN", netlink.LinkSetDown}, {"metrics-port-up", "ACTIVE", netlink.LinkSetUp}} {
		t0 := time.Now()
		want := map[string]string{"device": "rxe0", "port": "1", "state": step.state}
		var s guestkit.Scrape
		err := func() error {
			l, err := netlink.LinkByName(rxeNetdev)
			if err == nil {
				err = step.set(l)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", rxeNetdev, err)
			}
			s, err = freshScrape("rdma_chain_rdma_port_info", want)
			return err
		}()
		if err == nil {
			t.Logf("port-state kernel=%s: %s %s, the scrape says %s after %d ms", rdma.KernelRelease(), rxeNetdev,
				strings.ToLower(step.state), step.state, time.Since(t0).Milliseconds())
		}
		guestkit.Check(t, step.name, func() error {
			if err != nil {
				return err
			}
			if all := s.Find("rdma_chain_rdma_port_info", map[string]string{"device": "rxe0", "port": "1"}); len(all) != 1 {
				return fmt.Errorf("rxe0 port 1's info %v, want one sample, state %s", all, step.state)
			}
			return nil
		})
	}
}
