// Package shared is the VM tier's shared-mode scenarios on soft-RoCE, run
// in its guests: rxe0 on veth0 stays in init_net and each pod gets an
// ipvlan (L2) child of veth0, named rdma0, chained after ptp + host-local,
// through libcni with each plugin its own process.
//
// TestShared (scenario shared), at cniVersion 0.4.0 and 1.0.0: ADD's
// result and the child in the pod, CHECK, RoCE (rping) between two pods
// through their children, DEL (twice), CHECK noticing a missing child
// (106), DEL after the netns is gone.
//
// TestIPv6 (scenario ipv6), at 0.4.0, 1.0.0 and 1.1.0: rdma-chain's own
// "ipam" (host-local, fd00:77::/64) gives rdma0 an address in the pod
// only; the result gains rdma0's entry but not its address, so the whole
// chain's CHECK passes; the address is a RoCE v2 GID of rxe0 with ndev
// rdma0; rping between the pods over it moves rxe0's counters; DEL gives
// the leases and GIDs back, also after the netns is gone, and, when the
// pin is gone while a process holds the netns, deletes the child there
// first (through the host's nsid of it). Then a full GID
// table refuses a pod's ADD (111) leaving nothing, and a table with room
// takes it (gidroom_test.go).
//
// Every check is a subtest; the kernel is read through netlink, sysfs
// and pkg/rdma, never by parsing a tool's text.
package shared

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

type pod = guestkit.Pod

const (
	parent = "veth0" // rxe0's netdev, the children's parent
	rxe    = "rxe0"
)

func TestShared(t *testing.T) {
	testenv.VMGuest(t)
	if !setUp(t, "fd00::1/64") {
		t.Fatal("the node could not be set up: no case runs")
	}
	for _, v := range []string{"0.4.0", "1.0.0"} {
		t.Run("v"+v, func(t *testing.T) { sharedVersion(t, v) })
	}
}

// setUp makes rxe0 on veth0 (once per boot) and checks the mode is
// shared; node, an address in the pods' /64 on veth0, gives soft-RoCE
// the route it needs to the pods.
func setUp(t *testing.T, node string) bool {
	ok := guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe)
	ok = guestkit.Check(t, "mode-is-shared", func() error { return guestkit.ModeIs(rdma.ModeShared) }) && ok
	return guestkit.Check(t, "node-address", func() error { return guestkit.AddrOnce(parent, node) }) && ok
}

// sharedVersion is the shared scenario's part for one cniVersion.
func sharedVersion(t *testing.T, v string) {
	dataDir := "/run/rdma-chain-shared-" + v
	c := guestkit.NewCalls(t, v, dataDir)
	c.Conf(t, `"mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"`+dataDir+`","sharedLink":{"type":"ipvlan","mode":"l2"}`)
	parentIdx, err := guestkit.LinkIndex(parent)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := guestkit.NewPod("shared-", "pod1"), guestkit.NewPod("shared-", "pod2")
	for n, p := range []pod{p1, p2} {
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			continue
		}
		resultHasChild(t, c, p)
		childIsIpvlan(t, p, parentIdx)
		guestkit.Check(t, "state-file-"+p.Name, func() error { return c.RecordCount(n + 1) })
	}
	for _, p := range []pod{p1, p2} {
		guestkit.ExpectOK(t, "check-"+p.Name, c.Check(t, p))
	}
	guestkit.Check(t, "rping-between-pods", func() error { return rpingPods(t, p1, p2) })

	guestkit.ExpectOK(t, "del-pod2", c.Del(t, p2))
	guestkit.Check(t, "del-removes-child-pod2", func() error { return guestkit.NoLink(p2.NetNS, "rdma0") })
	guestkit.Check(t, "del-removes-record-pod2", func() error { return c.RecordCount(1) })
	guestkit.ExpectOK(t, "del-again-pod2", c.Del(t, p2))

	// CHECK must notice a missing child.
	if err := guestkit.InPod(p1.NetNS, func() error { return delLink("rdma0") }); err != nil {
		t.Errorf("delete pod1's rdma0: %v", err)
	}
	guestkit.ExpectCode(t, "check-mismatch-pod1", c.Check(t, p1), 106)
	guestkit.ExpectOK(t, "del-pod1-after-child-gone", c.Del(t, p1))
	guestkit.Check(t, "no-records-left", func() error { return c.RecordCount(0) })

	// The runtime may call DEL after the netns is gone.
	p3 := guestkit.NewPod("shared-", "pod3")
	guestkit.ExpectOK(t, "add-pod3", c.Add(t, p3))
	guestkit.DelNetNS(t, p3)
	guestkit.ExpectOK(t, "del-after-netns-gone", c.Del(t, p3))
	guestkit.Check(t, "no-records-after-netns-gone", func() error { return c.RecordCount(0) })

	guestkit.Check(t, "veth0-intact", func() error { return guestkit.HasAddr(parent, "192.168.77.1/24") })
	guestkit.Check(t, "rxe0-intact", func() error { return guestkit.DeviceOn(rxe, parent) })
	guestkit.DelNetNS(t, p1)
	guestkit.DelNetNS(t, p2)
}

// resultHasChild checks that the result has rdma0's entry with a MAC in
// p's sandbox and keeps ptp's eth0 and its 10.99.0.x address.
func resultHasChild(t *testing.T, c *guestkit.Calls, p pod) {
	t.Helper()
	t.Logf("%s: result at %s: %s", p.Name, c.V, c.C.Stdout)
	r, err := guestkit.ParseResult(c.C.Stdout)
	guestkit.Check(t, "result-"+p.Name, func() error {
		if err != nil {
			return err
		}
		_, f := r.Iface("rdma0")
		if mac, _ := f["mac"].(string); len(mac) != len("00:00:00:00:00:00") {
			return fmt.Errorf("no rdma0 entry with a MAC in the result: %s", c.C.Stdout)
		}
		return guestkit.WantField(f, "sandbox", p.NetNS)
	})
	guestkit.Check(t, "result-keeps-prev-"+p.Name, func() error { return keepsPrimary(c.C.Stdout) })
}

// keepsPrimary checks that the result has ptp's eth0 and its 10.99.0.x
// address.
func keepsPrimary(stdout []byte) error {
	r, err := guestkit.ParseResult(stdout)
	if err != nil {
		return err
	}
	if i, _ := r.Iface("eth0"); i < 0 {
		return fmt.Errorf("ptp's eth0 missing from the result: %s", stdout)
	}
	for _, ip := range r.IPs {
		if strings.HasPrefix(ip.Address, "10.99.0.") {
			return nil
		}
	}
	return fmt.Errorf("ptp's 10.99.0.x missing from the result: %s", stdout)
}

// childIsIpvlan checks that p's rdma0 is an ipvlan L2 child of veth0,
// up; veth0 stays in init_net, and rxe0 on it.
func childIsIpvlan(t *testing.T, p pod, parentIdx int) {
	t.Helper()
	l, err := guestkit.PodLink(p.NetNS, "rdma0")
	guestkit.Check(t, "ipvlan-child-"+p.Name, func() error {
		if err != nil {
			return err
		}
		iv, ok := l.(*netlink.IPVlan)
		if !ok || iv.Mode != netlink.IPVLAN_MODE_L2 {
			return fmt.Errorf("rdma0 is %s %+v, want ipvlan mode l2", l.Type(), l)
		}
		return nil
	})
	guestkit.Check(t, "child-up-"+p.Name, func() error {
		if err == nil && l.Attrs().Flags&net.FlagUp == 0 {
			err = fmt.Errorf("rdma0 is not up: %s", l.Attrs().Flags)
		}
		return err
	})
	guestkit.Check(t, "child-of-veth0-"+p.Name, func() error {
		if err == nil && l.Attrs().ParentIndex != parentIdx {
			err = fmt.Errorf("rdma0's parent is ifindex %d, veth0 is %d", l.Attrs().ParentIndex, parentIdx)
		}
		return err
	})
	guestkit.Check(t, "parent-in-init-net-"+p.Name, func() error {
		if _, err := netlink.LinkByName(parent); err != nil {
			return fmt.Errorf("init_net's %s: %w", parent, err)
		}
		return guestkit.NoLink(p.NetNS, parent)
	})
	guestkit.Check(t, "rxe0-on-veth0-"+p.Name, func() error { return guestkit.DeviceOn(rxe, parent) })
}

// rpingPods checks RoCE between two pods over rxe0 through their rdma0
// children (soft-RoCE needs the node route: fd00::1/64 on veth0).
func rpingPods(t *testing.T, server, client pod) error {
	for addr, p := range map[string]pod{"fd00::2/64": server, "fd00::3/64": client} {
		if err := guestkit.InPod(p.NetNS, func() error { return guestkit.AddrOnce("rdma0", addr) }); err != nil {
			return fmt.Errorf("%s on %s's rdma0: %w", addr, p.Name, err)
		}
	}
	return guestkit.Rping(t, rxe, server, client, "fd00::2", 3)
}

func delLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(l)
}
