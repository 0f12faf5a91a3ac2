package shared

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestSmoke is the smoke scenario, first in the shared-mode boot. It
// checks that the VM itself works without the plugin: its modules loaded, soft-RoCE rxe0 on
// veth0, a netns mode, a non-empty GID table, a netns with an ipvlan
// child of veth0, the tools the scenarios run, and rping over rxe0 in
// init_net.
func TestSmoke(t *testing.T) {
	testenv.VMGuest(t)
	guestkit.Check(t, "modules", func() error {
		for _, m := range []string{"rdma_rxe", "ib_core", "ipvlan"} {
			if _, err := os.Stat("/sys/module/" + m); err != nil {
				return fmt.Errorf("module %s: %w", m, err)
			}
		}
		return nil
	})
	if !guestkit.Check(t, "rxe0-created", guestkit.SetUpRxe) {
		t.Fatal("no soft-RoCE rxe0: no case runs")
	}
	guestkit.Check(t, "rdma-link-rxe0", func() error { return guestkit.DeviceOn(rxe, parent) })
	guestkit.Check(t, "netns-mode", func() error {
		mode, err := rdma.New().NetnsMode()
		if err == nil && mode != rdma.ModeShared && mode != rdma.ModeExclusive {
			err = fmt.Errorf("RDMA netns mode %q", mode)
		}
		return err
	})
	guestkit.Check(t, "gid-table", func() error {
		gs, err := guestkit.DevGIDs(rxe)
		t.Logf("rxe0 non-zero GIDs: %d", len(gs))
		if err == nil && len(gs) == 0 {
			err = fmt.Errorf("no non-zero GID on %s", rxe)
		}
		return err
	})
	p := guestkit.NewPod("smoke-", "smoke1")
	guestkit.Check(t, "netns-add", func() error { return guestkit.NewNetNS(p.NetNS) })
	guestkit.Check(t, "ipvlan-into-netns", func() error { return ipvlanInto(p) })
	guestkit.Check(t, "ibv-provider", func() error { _, err := os.Stat("/etc/libibverbs.d/rxe.driver"); return err })
	guestkit.Check(t, "tools-present", func() error {
		for _, b := range []string{"/usr/local/bin/cnitool", "/opt/cni/bin/ptp", "/opt/cni/bin/host-local", "rping"} {
			if _, err := exec.LookPath(b); err != nil {
				return fmt.Errorf("missing %s: %w", b, err)
			}
		}
		return nil
	})
	guestkit.Check(t, "rping-loopback", func() error { return guestkit.Rping(t, rxe, pod{}, pod{}, "192.168.77.1", 3) })
	guestkit.DelNetNS(t, p)
}

// ipvlanInto makes an ipvlan (L2) child of veth0, sm0, moves it into p's
// netns and sets it up there.
func ipvlanInto(p pod) error {
	par, err := netlink.LinkByName(parent)
	if err != nil {
		return err
	}
	iv := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "sm0", ParentIndex: par.Attrs().Index}, Mode: netlink.IPVLAN_MODE_L2}
	if err := netlink.LinkAdd(iv); err != nil {
		return fmt.Errorf("ipvlan sm0 on %s: %w", parent, err)
	}
	fd, err := os.Open(p.NetNS)
	if err != nil {
		return err
	}
	defer fd.Close()
	if err := netlink.LinkSetNsFd(iv, int(fd.Fd())); err != nil {
		return fmt.Errorf("sm0 into %s: %w", p.Name, err)
	}
	return guestkit.InPod(p.NetNS, func() error {
		l, err := netlink.LinkByName("sm0")
		if err != nil {
			return err
		}
		if _, ok := l.(*netlink.IPVlan); !ok {
			return fmt.Errorf("sm0 is %s in %s", l.Type(), p.Name)
		}
		return netlink.LinkSetUp(l)
	})
}
