// Package exclusive is the VM tier's exclusive-mode scenario on the
// kernel's real RDMA core, run in its guests (scenario exclusive-rdma,
// with a second NIC and the simrdma test device on it): simrdma0
// (integration/vm/simrdma) is a movable RDMA device bound to the
// virtio-net NIC eth0, which behaves like a physical NIC (it survives the
// death of a netns). For cniVersion 0.4.0 and 1.0.0, chained after
// ptp + host-local, through libcni with each plugin its own process:
// ADD / CHECK / DEL, the pod netns deleted before DEL, a stranded holder
// (netns gone, or path reused by another netns) reclaimed by the next
// ADD, two pods one device (11), failed ADDs after the move (IPAM, name
// taken), mode shared on an exclusive kernel (101), a device not offered
// (rxe0) never touched, and what SMC does with an annotated pod; the
// result's shape (rdma0's entry only, the whole chain's CHECK passes),
// and at 1.1.0 rdma0's MTU and PCI function and, with reportIPs, its
// address; eth0 never moved while it carries the node's default route or
// address (110); the device-info file.
//
// The package also holds the scenarios bond-exclusive (TestBondExclusive,
// bond_test.go: a device on a bond or on its slave refused) and
// multi-exclusive (TestMultiExclusive, multi_test.go: four devices on
// four NICs in one pod), which share its helpers.
//
// Every check is a subtest; the kernel is read through netlink, sysfs
// and pkg/rdma and pkg/smc, never by parsing a tool's text. Log lines
// carry the views before ADD, after ADD, after DEL and of the stranded
// reclaim.
package exclusive

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	nic    = "eth0"                                    // the virtio-net NIC simrdma0 is bound to
	device = "simrdma0"                                // its RDMA device
	rxe    = "rxe0"                                    // a device the conflists never offer
	v4GID  = "0000:0000:0000:0000:0000:ffff:c0a8:5801" // ::ffff:192.168.88.1
	v6GID  = "fd00:0088:0000:0000:0000:0000:0000:0001" // fd00:88::1
)

// base is the node before any pod: what every DEL must give back.
type base struct {
	nic  []string // eth0's view (nicView)
	gids []string // simrdma0's GIDs in init_net (simGIDs)
	rxe  string   // rxe0's port (rxeView)
	mac  string   // eth0's MAC
}

func TestExclusiveRDMA(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	if !setUp(t) {
		t.Fatal("the node could not be set up: no case runs")
	}
	b, err := readBase()
	if err != nil {
		t.Fatalf("read the node before any pod: %v", err)
	}
	t.Logf("host NIC before any pod: %q", b.nic)
	t.Logf("simrdma0 GIDs before any pod: %q", b.gids)
	for _, v := range []string{"0.4.0", "1.0.0"} {
		t.Run("v"+v, func(t *testing.T) { newEnv(t, v, b).lifecycle(t) })
	}
	t.Run("v1.1.0", func(t *testing.T) { newEnv(t, "1.1.0", b).v110(t) })
	guestkit.Check(t, "mode-still-exclusive", func() error { return guestkit.ModeIs(rdma.ModeExclusive) })
	t.Logf("exclusive-rdma: %.0f s", time.Since(start).Seconds())
}

// setUp switches the RDMA netns mode to exclusive (the guest has no netns
// yet), sets up eth0 as a node has it and rxe0 on a veth, and waits for
// eth0's addresses to be GIDs and settled. It reports whether every step
// held.
func setUp(t *testing.T) bool {
	steps := []struct {
		name string
		f    func() error
	}{
		{"switch-to-exclusive", func() error {
			if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
				return fmt.Errorf("rdma system set netns exclusive: %w", err)
			}
			return guestkit.ModeIs(rdma.ModeExclusive)
		}},
		{"simrdma0-registered", func() error { return guestkit.InInitNet(device) }},
		{"simrdma0-on-eth0", func() error { return guestkit.DeviceOn(device, nic) }},
		{"nic-setup", func() error { return guestkit.SetUpNIC(nic) }},
		{"rxe0-on-veth0", guestkit.SetUpRxe},
		{"host-gids-have-nic-addresses", func() error {
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
				gs, err := simGIDs("")
				if err == nil && (!slices.Contains(gs, v6GID+" eth0 RoCE v2") || !slices.Contains(gs, v4GID+" eth0 RoCE v2")) {
					err = fmt.Errorf("simrdma0 GIDs lack the NIC's addresses: %q", gs)
				}
				return err
			})
		}},
		{"nic-settled", nicSettled},
	}
	for _, s := range steps {
		if !guestkit.Check(t, s.name, s.f) {
			return false
		}
	}
	return true
}

// nicSettled waits until eth0 is settled (settled).
func nicSettled() error { return settled(nic) }

// settled waits until netdev name is running, with its IPv6 link-local
// address and no tentative one: the state a restore must give back. The
// kernel sets RUNNING (and adds the link-local address) when linkwatch
// reports the carrier, which under TCG can come a second or more after the
// link went up; read before that, the node looks different after every
// restore. The local route of an address comes when its DAD ends.
func settled(name string) error {
	return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().RawFlags&unix.IFF_RUNNING == 0 {
			return fmt.Errorf("%s is not running yet (flags %#x)", name, l.Attrs().RawFlags)
		}
		as, err := nldump.AddrList(nil, l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		linkLocal := false
		for _, a := range as {
			if a.Flags&unix.IFA_F_TENTATIVE != 0 {
				return fmt.Errorf("%s still has a tentative address %s", name, a.IPNet)
			}
			linkLocal = linkLocal || a.IP.IsLinkLocalUnicast()
		}
		if !linkLocal {
			return fmt.Errorf("%s has no IPv6 link-local address yet", name)
		}
		return nil
	})
}

func readBase() (base, error) {
	var b base
	var err error
	if b.nic, err = guestkit.NICView(nic); err != nil {
		return b, err
	}
	if b.gids, err = simGIDs(""); err != nil {
		return b, err
	}
	if b.rxe, err = guestkit.PortView(rxe); err != nil {
		return b, err
	}
	l, err := netlink.LinkByName(nic)
	if err != nil {
		return b, err
	}
	b.mac = l.Attrs().HardwareAddr.String()
	return b, nil
}
