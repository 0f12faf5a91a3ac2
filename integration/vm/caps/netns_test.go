package caps

import (
	"errors"
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
	p.rxeNetdevMove = "untested"
	if exclusive {
		guestkit.Check(t, "rxe-netdev-move", func() error {
			where, err := rxeNetdevMove(ns.NetNS)
			if err != nil {
				where = "failed"
			}
			p.rxeNetdevMove = where
			return err
		})
		t.Logf("ip link set rxeprobe0 netns capns: its soft-RoCE device %s", p.rxeNetdevMove)
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

// rxeNetdevMove gives a veth a soft-RoCE device of its own, moves the veth
// into the netns at nsPath (exclusive mode: what the plugin's exclusive
// ADD does to a netdev) and tells where the device is then: "follows" (in
// that netns), "stays" (init_net) or "gone". rxe unregisters a device from
// a work queue, and a device that follows would register again in the
// netns later, so both are polled for: one still in init_net after 30 s
// stays, one not in the netns 5 s after it left init_net is gone. The veth
// goes with the netns; one that was not moved is deleted here.
func rxeNetdevMove(nsPath string) (string, error) {
	const dev, netdev = "rxeprobe", "rxeprobe0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: netdev}, PeerName: "rxeprobe1"}); err != nil {
		return "", fmt.Errorf("veth %s: %w", netdev, err)
	}
	l, err := netlink.LinkByName(netdev)
	if err != nil {
		return "", err
	}
	moved := false
	defer func() {
		if !moved {
			_ = netlink.LinkDel(l)
		}
	}()
	if err := netlink.LinkSetUp(l); err != nil {
		return "", err
	}
	if err := guestkit.AddRxe(dev, netdev); err != nil {
		return "", err
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := netlink.LinkSetNsFd(l, int(f.Fd())); err != nil {
		return "", fmt.Errorf("ip link set %s netns: %w", netdev, err)
	}
	moved = true
	stillThere := errors.New(dev + " still in init_net")
	left := guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
		has, err := guestkit.InitNetHas(dev)
		if err == nil && has {
			err = stillThere
		}
		return err
	})
	switch {
	case errors.Is(left, stillThere):
		return "stays", nil
	case left != nil:
		return "", left
	}
	inPod := guestkit.Poll(5*time.Second, 100*time.Millisecond, func() error {
		return guestkit.InPod(nsPath, func() error { _, err := netlink.RdmaLinkByName(dev); return err })
	})
	if inPod == nil {
		return "follows", nil
	}
	return "gone", nil
}
