package shared

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const (
	leaseDir = "/run/ipam6/rdmanet" // host-local's leases of rdma0's addresses
	podNet   = "fd00:77:"           // their prefix
	ipv6Data = "/run/rdma-chain"
	ipv6IPAM = `"ipam":{"type":"host-local","dataDir":"/run/ipam6","ranges":[[{"subnet":"fd00:77::/64","rangeStart":"fd00:77::10"}]]}`
	ipv6Conf = `"mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"` + ipv6Data + `","sharedLink":{"type":"ipvlan","mode":"l2"},` + ipv6IPAM
)

func TestIPv6(t *testing.T) {
	testenv.VMGuest(t)
	// Soft-RoCE needs a route to the pods' /64 in init_net.
	if !setUp(t, "fd00:77::1/64") {
		t.Fatal("the node could not be set up: no case runs")
	}
	var c *guestkit.Calls
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run("v"+v, func(t *testing.T) { c = ipv6Version(t, v) })
	}
	t.Run("gid-room", func(t *testing.T) { gidRoom(t, c) })
}

// ipv6Version is the ipv6 scenario's part for one cniVersion; it returns its calls,
// whose conflist the GID room part goes on with.
func ipv6Version(t *testing.T, v string) *guestkit.Calls {
	c := guestkit.NewCalls(t, v, ipv6Data)
	c.Conf(t, ipv6Conf)
	t.Logf("cniVersion %s conflist: rdma-chain {%s}", v, ipv6Conf)
	p1, p2 := guestkit.NewPod("ipv6-", "pod1"), guestkit.NewPod("ipv6-", "pod2")
	addrs := map[string]string{}
	for n, p := range []pod{p1, p2} {
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			continue
		}
		addrs[p.Name] = podAttached(t, c, p, n+1)
	}
	for _, p := range []pod{p1, p2} {
		guestkit.ExpectOK(t, "check-"+p.Name, c.CheckOwn(t, p))
		guestkit.ExpectOK(t, "full-chain-check-"+p.Name, c.Check(t, p))
	}
	guestkit.Check(t, "rping-ipv6", func() error { return guestkit.Rping(t, rxe, p1, p2, addrs["pod1"], 10) })

	for _, p := range []pod{p1, p2} {
		guestkit.ExpectOK(t, "del-"+p.Name, c.Del(t, p))
		guestkit.Check(t, "child-gone-"+p.Name, func() error { return guestkit.NoLink(p.NetNS, "rdma0") })
	}
	guestkit.Check(t, "no-ipv6-gid-left", func() error {
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, noPodGIDs)
	})
	guestkit.Check(t, "leases-released", func() error { return leaseCount(0) })
	guestkit.Check(t, "no-records-left", func() error { return c.RecordCount(0) })
	for _, p := range []pod{p1, p2} {
		guestkit.ExpectOK(t, "del-again-"+p.Name, c.Del(t, p))
	}

	// DEL after the runtime already deleted the netns: the lease still goes.
	p3 := guestkit.NewPod("ipv6-", "pod3")
	guestkit.ExpectOK(t, "add-pod3", c.Add(t, p3))
	a3, err := guestkit.PodAddr(p3.NetNS, "rdma0", podNet)
	guestkit.Check(t, "lease-taken-pod3", func() error { return errors.Join(err, leased(a3)) })
	guestkit.DelNetNS(t, p3)
	guestkit.ExpectOK(t, "del-after-netns-gone", c.Del(t, p3))
	guestkit.Check(t, "lease-released-netns-gone", func() error { return leaseCount(0) })
	guestkit.Check(t, "no-records-netns-gone", func() error { return c.RecordCount(0) })
	heldNetnsDel(t, c)
	guestkit.DelNetNS(t, p1)
	guestkit.DelNetNS(t, p2)
	return c
}

// heldNetnsDel checks that DEL after the pin is gone while a process
// (this one, through an open fd) still holds the netns deletes the
// child there through the host's nsid of that netns, and only then
// gives back its lease: no child, GID, lease or record left.
func heldNetnsDel(t *testing.T, c *guestkit.Calls) {
	p := guestkit.NewPod("ipv6-", "pod4")
	if !guestkit.ExpectOK(t, "add-pod4", c.Add(t, p)) {
		return
	}
	held, err := os.Open(p.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPath := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), held.Fd())
	guestkit.Check(t, "record-has-nsid-pod4", func() error { return recordHas(c, `"podNetnsId":`) })
	guestkit.DelNetNS(t, p)
	guestkit.Check(t, "child-in-held-netns-pod4", func() error {
		_, err := guestkit.PodLink(heldPath, "rdma0")
		return err
	})
	guestkit.ExpectOK(t, "del-pin-gone-netns-held", c.Del(t, p))
	guestkit.Check(t, "child-gone-netns-held", func() error { return guestkit.NoLink(heldPath, "rdma0") })
	guestkit.Check(t, "no-gid-netns-held", func() error {
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, noPodGIDs)
	})
	guestkit.Check(t, "lease-released-netns-held", func() error { return leaseCount(0) })
	guestkit.Check(t, "no-records-netns-held", func() error { return c.RecordCount(0) })
}

// recordHas checks that the one record of c holds s.
func recordHas(c *guestkit.Calls, s string) error {
	recs, err := c.Records()
	if err != nil {
		return err
	}
	if len(recs) != 1 {
		return fmt.Errorf("records %q, want one", recs)
	}
	b, err := os.ReadFile(c.DataDir + "/attachments/" + recs[0])
	if err == nil && !strings.Contains(string(b), s) {
		err = fmt.Errorf("record %s has no %s: %s", recs[0], s, b)
	}
	return err
}

// podAttached checks the n-th pod ADD of a version: the result's shape
// (soft-RoCE's rxe0 has no PCI address: no pciID), rdma0's address in the
// pod only and leased, its GID with ndev rdma0, n records. It returns
// rdma0's address.
func podAttached(t *testing.T, c *guestkit.Calls, p pod, n int) string {
	t.Helper()
	guestkit.ResultShape(t, "result-"+p.Name, c.C.Stdout, c.V, p, "")
	guestkit.Check(t, "result-primary-ip-"+p.Name, func() error {
		r, err := guestkit.ParseResult(c.C.Stdout)
		if err != nil {
			return err
		}
		for _, ip := range r.IPs {
			if strings.HasPrefix(ip.Address, "10.99.0.") && ip.Interface == nil {
				return fmt.Errorf("ptp's IP lost its interface: %s", c.C.Stdout)
			}
		}
		return nil
	})
	addr, err := guestkit.PodAddr(p.NetNS, "rdma0", podNet)
	guestkit.Check(t, "ipv6-on-rdma0-"+p.Name, func() error { return err })
	guestkit.Check(t, "addr-on-rdma0-"+p.Name, func() error {
		return guestkit.InPod(p.NetNS, func() error { return guestkit.HasAddr("rdma0", addr+"/64") })
	})
	guestkit.Check(t, "not-tentative-"+p.Name, func() error {
		return guestkit.InPod(p.NetNS, func() error { return notTentative("rdma0", addr) })
	})
	guestkit.Check(t, "not-on-eth0-"+p.Name, func() error {
		return guestkit.InPod(p.NetNS, func() error { return noAddrWith("eth0", podNet) })
	})
	guestkit.Check(t, "not-in-init-net-"+p.Name, func() error { return notInInitNet(addr) })
	guestkit.Check(t, "lease-taken-"+p.Name, func() error { return leased(addr) })
	guestkit.Check(t, "gid-"+p.Name, func() error {
		// the GID appears through a netdev event
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return guestkit.HasGID(rxe, guestkit.GIDOf(addr), "rdma0") })
	})
	guestkit.Check(t, "state-file-"+p.Name, func() error { return c.RecordCount(n) })
	return addr
}

// notTentative checks that addr on netdev name is not tentative (the
// kernel's own link-local address may be). Not polled: the address must
// be usable when ADD returns.
func notTentative(name, addr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	as, err := nldump.AddrList(nil, l, netlink.FAMILY_V6)
	for _, a := range as {
		if a.IP.String() == addr && a.Flags&unix.IFA_F_TENTATIVE != 0 {
			return fmt.Errorf("%s's %s is tentative", name, a.IPNet)
		}
	}
	return err
}

// noAddrWith checks that netdev name has no address starting with
// prefix.
func noAddrWith(name, prefix string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	as, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
	for _, a := range as {
		if strings.HasPrefix(a.IP.String(), prefix) {
			return fmt.Errorf("%s has %s", name, a.IPNet)
		}
	}
	return err
}

// notInInitNet checks that no netdev of init_net has addr.
func notInInitNet(addr string) error {
	as, err := nldump.AddrList(nil, nil, netlink.FAMILY_V6)
	for _, a := range as {
		if a.IP.Equal(net.ParseIP(addr)) {
			return fmt.Errorf("init_net has %s (ifindex %d)", a.IPNet, a.LinkIndex)
		}
	}
	return err
}

// leased checks that host-local holds a lease file for addr.
func leased(addr string) error {
	_, err := os.Stat(leaseDir + "/" + addr)
	return err
}

// leaseCount checks that host-local holds exactly n leases of fd00:77::
// addresses.
func leaseCount(n int) error {
	ls, err := leases()
	if err == nil && len(ls) != n {
		err = fmt.Errorf("%d lease files in %s, want %d: %q", len(ls), leaseDir, n, ls)
	}
	return err
}

func leases() ([]string, error) {
	es, err := os.ReadDir(leaseDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), podNet) {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// noPodGIDs checks that rxe0 has no GID of a fd00:77:: address other
// than the node's (on veth0).
func noPodGIDs() error {
	gs, err := guestkit.DevGIDs(rxe)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if strings.HasPrefix(g.GID, "fd00:0077:") && g.Netdev != parent {
			return fmt.Errorf("GIDs left: %s", guestkit.GIDList(gs))
		}
	}
	return nil
}
