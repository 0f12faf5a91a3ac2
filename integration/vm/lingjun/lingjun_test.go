// Package lingjun is the VM tier's Lingjun shapes in shared mode on
// soft-RoCE, run in its guests (the lingjun boot).
//
// TestBond (scenario bond): a bonded RDMA netdev, as Lingjun nodes have
// it (mlx5_bond_N on bondN). rxe1 is bound to bond0, an active-backup
// bond of two links with the node's fd00:79::1/64; two pods get ipvlan
// children of the bond with IPv6 from the conflist's podIPv6Block
// (::f:0:c00/124, placed in bond0's /64, leases from host-local); the
// addresses become GIDs of rxe1 on the children, rping runs between the
// pods over rxe1, and DEL gives everything back, the bond untouched. Then
// pkg/netdev's host link lookup tests run on this kernel with bonds.
//
// TestMulti (scenario multi): four devices per pod with one conflist for
// every node. rxe10..rxe13, each on its own netdev mn0..mn3 with its own
// /64 (fd00:90::/64 .. fd00:93::/64, node address ::1); podIPv6Block
// places each pod interface's address in its own device's /64. Two pods
// get four ipvlan children each (rdma0..rdma3), each address a GID of its
// own device only, rping runs over each device, and DEL releases all
// four children and leases of each pod.
//
// Every check is a subtest; the kernel is read through netlink, sysfs
// and pkg/rdma, never by parsing a tool's text.
package lingjun

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

type pod = guestkit.Pod

func TestBond(t *testing.T) {
	testenv.VMGuest(t)
	ok := guestkit.Check(t, "load-bonding", guestkit.LoadBonding)
	ok = ok && guestkit.Check(t, "make-bond", func() error { return guestkit.MakeBond("bond0", "bs0", "bs1") })
	ok = ok && guestkit.Check(t, "node-address", func() error { return guestkit.AddrOnce("bond0", "fd00:79::1/64") })
	ok = ok && guestkit.Check(t, "rxe-on-bond", func() error { return guestkit.AddRxe("rxe1", "bond0") })
	ok = ok && guestkit.Check(t, "mode-is-shared", func() error { return guestkit.ModeIs(rdma.ModeShared) })
	if !ok {
		t.Fatal("the node could not be set up: no case runs")
	}
	bondIdx, err := guestkit.LinkIndex("bond0")
	if err != nil {
		t.Fatal(err)
	}
	s := newSetup(t, "bond", "/run/ipam-bond/rdmanet", "fd00:79:", `"devices":["rxe1"]`)
	pods := []pod{guestkit.NewPod("bond-", "b1"), guestkit.NewPod("bond-", "b2")}
	addrs := map[string]string{}
	for _, p := range pods {
		if !guestkit.ExpectOK(t, "add-"+p.Name, s.Add(t, p)) {
			continue
		}
		a, err := guestkit.PodAddr(p.NetNS, "rdma0", "fd00:79::f:0:c0")
		addrs[p.Name] = a
		guestkit.Check(t, "address-from-block-"+p.Name, func() error {
			return errors.Join(err, guestkit.InPod(p.NetNS, func() error { return guestkit.HasAddr("rdma0", a+"/124") }))
		})
		guestkit.Check(t, "ipvlan-child-of-bond-"+p.Name, func() error { return childOf(p, "rdma0", bondIdx) })
		guestkit.Check(t, "gid-"+p.Name, func() error { return gidOnly(a, "rdma0", "rxe1", nil) })
	}
	guestkit.Check(t, "rping-over-bond", func() error { return guestkit.Rping(t, "rxe1", pods[0], pods[1], addrs["b1"], 10) })
	s.delAll(t, pods...)
	guestkit.Check(t, "bond-intact", bondIntact)
	if err := guestkit.DelRxe("rxe1"); err != nil {
		t.Error(err)
	}
	guestkit.Check(t, "netdev-lookup-tests", netdevTests)
}

// setup is one scenario's conflist, state and leases.
type setup struct {
	*guestkit.Calls
	leaseDir, prefix string
}

// newSetup is the scenario name's conflist at 1.0.0: rdma-chain with
// devices (its "devices" field), addresses from podIPv6Block in the
// devices' netdevs' /64s, leased by host-local under leaseDir (prefix:
// the addresses' start).
func newSetup(t *testing.T, name, leaseDir, prefix, devices string) *setup {
	s := &setup{Calls: guestkit.NewCalls(t, "1.0.0", "/run/rdma-chain-"+name), leaseDir: leaseDir, prefix: prefix}
	fields := `"mode":"shared",` + devices + `,"podSelection":"all","dataDir":"` + s.DataDir +
		`","podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","dataDir":"` + strings.TrimSuffix(leaseDir, "/rdmanet") + `"}`
	s.Conf(t, fields)
	t.Logf("%s conflist: rdma-chain {%s}", name, fields)
	return s
}

// delAll is DEL of each pod (its RDMA interfaces gone, its netns
// deleted), then no lease and no record left.
func (s *setup) delAll(t *testing.T, pods ...pod) {
	t.Helper()
	for _, p := range pods {
		guestkit.ExpectOK(t, "del-"+p.Name, s.Del(t, p))
		guestkit.Check(t, "rdma-gone-"+p.Name, func() error { return noRDMALinks(p) })
		guestkit.DelNetNS(t, p)
	}
	guestkit.Check(t, "leases-released", func() error {
		es, err := os.ReadDir(s.leaseDir)
		var left []string
		for _, e := range es {
			if strings.HasPrefix(e.Name(), s.prefix) {
				left = append(left, e.Name())
			}
		}
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("lease files left in %s: %q", s.leaseDir, left)
		}
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		return err
	})
	guestkit.Check(t, "no-records-left", func() error { return s.RecordCount(0) })
}

// noRDMALinks checks that p's netns has no link whose name starts with
// rdma.
func noRDMALinks(p pod) error {
	return guestkit.InPod(p.NetNS, func() error {
		ls, err := nldump.LinkList(nil)
		for _, l := range ls {
			if strings.HasPrefix(l.Attrs().Name, "rdma") {
				return fmt.Errorf("%s still has %s", p.Name, l.Attrs().Name)
			}
		}
		return err
	})
}

// bondIntact checks that both slaves are still in bond0, which is up.
func bondIntact() error {
	b, err := netlink.LinkByName("bond0")
	if err != nil {
		return err
	}
	if b.Attrs().Flags&net.FlagUp == 0 {
		return errors.New("bond0 is down")
	}
	for _, s := range []string{"bs0", "bs1"} {
		l, err := netlink.LinkByName(s)
		if err != nil {
			return err
		}
		if l.Attrs().MasterIndex != b.Attrs().Index {
			return fmt.Errorf("%s's master is ifindex %d, bond0 is %d", s, l.Attrs().MasterIndex, b.Attrs().Index)
		}
	}
	return nil
}

// netdevTests runs pkg/netdev's host link lookup and netns-local tests
// on this kernel, with bonds (the host running the tier has no bonding).
func netdevTests() error {
	cmd := exec.Command("/usr/local/bin/netdev.test", "-test.v", "-test.count=1",
		"-test.run", "^(TestRestoreNeverMoved|TestRestoreAmongLinksSharingMAC|TestNetnsLocal)$")
	cmd.Env = append(os.Environ(), "RC_PRIVILEGED=1", "RC_NETDEV_BOND=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("netdev.test: %w: %s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestRestoreNeverMoved/bond/without_identity") {
		return fmt.Errorf("netdev.test ran no bond case: %s", out)
	}
	return nil
}

// childOf checks that link in p's netns is an ipvlan child of ifindex
// parent.
func childOf(p pod, link string, parent int) error {
	l, err := guestkit.PodLink(p.NetNS, link)
	if err != nil {
		return err
	}
	if _, ok := l.(*netlink.IPVlan); !ok {
		return fmt.Errorf("%s's %s is %s, want ipvlan", p.Name, link, l.Type())
	}
	if l.Attrs().ParentIndex != parent {
		return fmt.Errorf("%s's %s has parent ifindex %d, want %d", p.Name, link, l.Attrs().ParentIndex, parent)
	}
	return nil
}

// gidOnly checks that addr becomes a GID of dev with ndev link (through
// a netdev event: polled), and of none of others.
func gidOnly(addr, link, dev string, others []string) error {
	if addr == "" {
		return errors.New("no address")
	}
	gid := guestkit.GIDOf(addr)
	if err := guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return guestkit.HasGID(dev, gid, link) }); err != nil {
		return err
	}
	for _, o := range others {
		gs, err := guestkit.DevGIDs(o)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.GID == gid {
				return fmt.Errorf("address %s of %s is a GID of %s too: %s", addr, link, o, guestkit.GIDList(gs))
			}
		}
	}
	return nil
}
