package exclusive

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

// lifecycle is one cniVersion's (0.4.0, 1.0.0) cases, in order: each
// leaves the node as it found it, which the next one's checks rely on.
func (e *env) lifecycle(t *testing.T) {
	p := guestkit.NewPod("xrdma-", "pod1")
	views(t, "before-add")
	if !guestkit.ExpectOK(t, "add", e.Add(t, p)) {
		t.Fatal("ADD failed: the cases after it would read its failure")
	}
	views(t, "after-add", p)
	e.podHolds(t, "add", p)
	e.addressAndGID(t, p)
	e.checks(t, p)
	e.delete(t, p)
	e.goneNetns(t)
	for _, c := range strandedCases {
		if c.version == e.V {
			e.stranded(t, c.reuse)
		}
	}
	e.twoPods(t)
	e.failedIPAM(t)
	e.nameTaken(t)
	e.sharedOnExclusive(t)
	e.smcRaw(t)
	e.smcAnnotated(t)
}

// addressAndGID checks ADD's result, rdma0's IPv6 address in the pod
// and its GID in the pod's view of simrdma0, one record.
func (e *env) addressAndGID(t *testing.T, p pod) {
	v6 := podIP6(t, p, "fd00:99:")
	guestkit.Check(t, "add-ipv6-on-rdma0", func() error {
		if v6 == nil {
			return fmt.Errorf("no fd00:99:: address on rdma0 in %s", p.Name)
		}
		return nil
	})
	guestkit.ResultShape(t, "add-result", e.C.Stdout, e.V, p, "")
	guestkit.Check(t, "add-ipv6-in-pod-gid-table", func() error {
		if v6 == nil {
			return fmt.Errorf("no address")
		}
		want := gidOf(v6) + " rdma0 RoCE v2"
		return pollGIDs(device, p.NetNS, want)
	})
	gs, err := simGIDs(p.NetNS)
	t.Logf("%s simrdma0 GIDs: %q %v", p.Name, gs, err)
	guestkit.Check(t, "add-one-record", func() error { return e.RecordCount(1) })
}

// pollGIDs polls until dev's GIDs in the netns at nsPath have want
// ("GID NDEV TYPE").
func pollGIDs(dev, nsPath, want string) error {
	return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
		gs, err := devGIDs(dev, nsPath)
		if err == nil && !slices.Contains(gs, want) {
			err = fmt.Errorf("%q not in %s's %s table: %q", want, nsPath, dev, gs)
		}
		return err
	})
}

// podIP6 is rdma0's address in p that starts with prefix, nil if none.
func podIP6(t *testing.T, p pod, prefix string) net.IP {
	t.Helper()
	for _, a := range netnstest.GlobalV6(t, nsOf(t, p), "rdma0") {
		if strings.HasPrefix(a, prefix) {
			ip, _, _ := net.ParseCIDR(a)
			return ip
		}
	}
	return nil
}

func nsOf(t *testing.T, p pod) ns.NetNS {
	t.Helper()
	n, err := ns.GetNS(p.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// gidOf is ip in the 8 x 4 hex digit form of the GID table.
func gidOf(ip net.IP) string {
	b := ip.To16()
	var g []string
	for i := 0; i < 16; i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(g, ":")
}

// checks runs CHECK of rdma-chain alone and of the whole chain, then with
// the device and then the netdev moved back to init_net by hand (106),
// each put back after.
func (e *env) checks(t *testing.T, p pod) {
	guestkit.ExpectOK(t, "check-ok", e.CheckOwn(t, p))
	guestkit.ExpectOK(t, "check-full-chain", e.Check(t, p))
	// from a thread inside the pod: the kernel's rule for moving out
	mustDo(t, "move simrdma0 back to init_net", moveDevice(p.NetNS, "/proc/1/ns/net"))
	guestkit.ExpectCode(t, "check-device-moved-106", e.CheckOwn(t, p), 106, device)
	mustDo(t, "move simrdma0 into the pod", moveDevice("", p.NetNS))
	guestkit.ExpectOK(t, "check-ok-device-back", e.CheckOwn(t, p))
	v6 := podIP6(t, p, "fd00:99:")
	// lands in init_net as rdma0 (addresses go)
	mustDo(t, "move rdma0 to init_net", moveLink(p.NetNS, "rdma0", "/proc/1/ns/net", nil))
	guestkit.ExpectCode(t, "check-netdev-moved-106", e.CheckOwn(t, p), 106, "rdma0")
	mustDo(t, "move rdma0 back", moveLink("", "rdma0", p.NetNS, v6))
	guestkit.ExpectOK(t, "check-ok-netdev-back", e.CheckOwn(t, p))
}

func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// moveDevice moves simrdma0 from the netns at from ("": init_net) to the
// one at to, asking from a thread in from.
func moveDevice(from, to string) error {
	return within(from, func() error {
		fd, err := unix.Open(to, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		l, err := netlink.RdmaLinkByName(device)
		if err != nil {
			return err
		}
		return netlink.RdmaLinkSetNsFd(l, uint32(fd))
	})
}

// moveLink moves netdev name from the netns at from ("": init_net) to the
// one at to; with addr, brings it up there with addr/64 (no DAD).
func moveLink(from, name, to string, addr net.IP) error {
	err := within(from, func() error {
		fd, err := unix.Open(to, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(l, fd)
	})
	if err != nil || addr == nil {
		return err
	}
	return within(to, func() error {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err == nil {
			err = netnstest.AddAddrTo(l, addr.String()+"/64")
		}
		return err
	})
}

// within runs f in the netns at path, or here for "".
func within(path string, f func() error) error {
	if path == "" {
		return f()
	}
	return guestkit.InPod(path, f)
}

// delete checks that DEL gives eth0 and simrdma0 back, the pod keeps
// neither, and a second DEL succeeds.
func (e *env) delete(t *testing.T, p pod) {
	guestkit.ExpectOK(t, "del", e.Del(t, p))
	views(t, "after-del", p)
	e.hostRestored(t, "del")
	guestkit.Check(t, "del-pod-has-no-rdma0", func() error { return guestkit.NoLink(p.NetNS, "rdma0") })
	guestkit.Check(t, "del-pod-has-no-device", func() error {
		devs, err := podDevices(p.NetNS)
		if err == nil && len(devs) > 0 {
			err = fmt.Errorf("%s sees %s", p.Name, devList(devs))
		}
		return err
	})
	guestkit.ExpectOK(t, "del-again", e.Del(t, p))
	guestkit.DelNetNS(t, p)
}

// goneNetns deletes the pod netns before DEL and checks that the kernel
// gives the device and the NIC back (the NIC as devN, since a dummy
// rdma0 takes its name in init_net), then that DEL restores the NIC's
// name and all.
func (e *env) goneNetns(t *testing.T) {
	p := guestkit.NewPod("xrdma-", "pod2")
	guestkit.ExpectOK(t, "gone-netns-add", e.Add(t, p))
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "rdma0"}}
	mustDo(t, "dummy rdma0 in init_net", netlink.LinkAdd(dummy))
	guestkit.DelNetNS(t, p)
	var order string
	guestkit.Check(t, "gone-netns-kernel-refunds-device-and-nic", func() (err error) {
		order, err = refundOrder(e.b.mac)
		return err
	})
	name, _ := linkByMAC(e.b.mac)
	t.Logf("gone-netns: %s; the kernel returned the NIC as %q (rdma0 taken in init_net)", order, name)
	mustDo(t, "delete the dummy rdma0", netlink.LinkDel(dummy))
	guestkit.ExpectOK(t, "gone-netns-del", e.Del(t, p))
	views(t, "after-gone-netns-del")
	e.hostRestored(t, "gone-netns")
}
