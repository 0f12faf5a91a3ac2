package caps

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// netnsOps probes the RDMA netns operations: the mode switch to
// exclusive, moving each device into a netns (exclusive mode only), the
// device back when that netns goes, and the switch back to shared (EBUSY
// until the kernel has freed the netns). A probe's outcome is a fact, not
// a check: only what must hold whatever the kernel (the set-up, a moved
// device coming back) is a check.
func (p *probe) netnsOps(t *testing.T) {
	err := netlink.RdmaSystemSetNetnsMode("exclusive")
	p.modeSet = err == nil && guestkit.ModeIs(rdma.ModeExclusive) == nil
	t.Logf("rdma system set netns exclusive: %v (%v)", yesNo(p.modeSet), err)
	if !guestkit.Check(t, "rxe0", guestkit.SetUpRxe) ||
		!guestkit.Check(t, "simrdma0-registered", func() error { _, err := netlink.RdmaLinkByName("simrdma0"); return err }) {
		t.Fatal("no RDMA device to probe with")
	}
	ns := guestkit.NewPod("caps-", "capns")
	guestkit.NetNS(t, ns)
	exclusive := guestkit.ModeIs(rdma.ModeExclusive) == nil
	for _, d := range []string{"simrdma0", "rxe0"} {
		if exclusive {
			err := move(d, ns.NetNS)
			p.moved[d] = err == nil
			t.Logf("rdma dev set %s netns capns: %s (%v)", d, yesNo(p.moved[d]), err)
		}
	}
	guestkit.DelNetNS(t, ns)
	for _, d := range []string{"simrdma0", "rxe0"} {
		if p.moved[d] {
			guestkit.Check(t, "back-"+d, func() error {
				return guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
					_, err := netlink.RdmaLinkByName(d)
					return err
				})
			})
		}
	}
	if p.modeSet {
		err := guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
			if err := netlink.RdmaSystemSetNetnsMode("shared"); err != nil {
				return err
			}
			return guestkit.ModeIs(rdma.ModeShared)
		})
		p.modeSet = err == nil
		t.Logf("rdma system set netns shared: %v", err)
	}
}

// move moves RDMA device dev into the netns at nsPath and wants it seen
// there.
func move(dev, nsPath string) error {
	l, err := netlink.RdmaLinkByName(dev)
	if err != nil {
		return err
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := netlink.RdmaLinkSetNsFd(l, uint32(f.Fd())); err != nil {
		return fmt.Errorf("rdma dev set %s netns: %w", dev, err)
	}
	return guestkit.InPod(nsPath, func() error {
		_, err := netlink.RdmaLinkByName(dev)
		return err
	})
}
