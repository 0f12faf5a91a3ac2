package chain

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestSharedDelUnpinnedNetns checks that DEL of a pod whose netns pin is
// gone while the test still holds the netns (as a leaked process would)
// deletes its child from the host netns through the recorded nsid and
// ifindex, and only then releases the lease; a netns that really died is
// released as before; a look-up the kernel refuses (no CAP_NET_ADMIN)
// fails with 11, keeping the child, the lease and the record, and the
// next DEL finishes.
func TestSharedDelUnpinnedNetns(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name    string
		dies    bool // the netns dies with its pin
		refused bool // the first DEL's look-up runs without CAP_NET_ADMIN
	}{
		{name: "netns held"},
		{name: "netns died", dies: true},
		{name: "look-up refused", refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, conf, leases := ipamNode(t, false)
			pod := netnstest.NewNS(t)
			if err := n.run(add, pod, conf, prevResult100); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if _, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || leaseCount(t, leases) != 1 {
				t.Fatalf("ADD made no child or no lease")
			}
			if rec := readFile(t, stateFiles(t, n.dir)[0]); !strings.Contains(rec, `"podNetnsId":`) {
				t.Errorf("record without the child's nsid: %s", rec)
			}
			if err := netnstest.Unpin(pod.Path()); err != nil {
				t.Fatal(err)
			}
			if tt.dies {
				_ = pod.Close()
			}
			ipam := &childFirst{t: t, pod: pod, held: !tt.dies}
			n.wrap = func(p *Plugin) {
				ipam.IPAM = p.env.IPAM
				p.env.IPAM = ipam
				if tt.refused {
					p.env.Links = noNetAdmin{p.env.Links}
				}
			}
			if tt.refused {
				wantCode(t, n.run(del, pod, conf, ""), 11, "may still hold its address")
				if _, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || leaseCount(t, leases) != 1 || len(stateFiles(t, n.dir)) != 1 || ipam.dels != 0 {
					t.Fatalf("refused DEL gave back something: child %v, leases %d, records %d", ok, leaseCount(t, leases), len(stateFiles(t, n.dir)))
				}
				tt.refused = false
			}
			for i := range 2 {
				if err := n.run(del, pod, conf, ""); err != nil {
					t.Fatalf("DEL %d: %v", i+1, err)
				}
			}
			if !tt.dies {
				if names := netnstest.Names(t, pod); len(names) != 1 {
					t.Errorf("held netns keeps %v", names)
				}
			}
			if leaseCount(t, leases) != 0 || len(stateFiles(t, n.dir)) != 0 || ipam.dels == 0 {
				t.Errorf("after DEL: leases %d, records %d, IPAM DELs %d", leaseCount(t, leases), len(stateFiles(t, n.dir)), ipam.dels)
			}
			n.assertHostRestored(t)
		})
	}
}

// TestSharedDelByRecordedID checks that DEL deletes a child whose record has
// its nsid through that nsid and ifindex from the host netns, before the lease
// goes, whatever the netns path names: a recorded path that cannot be read
// (CNI_NETNS empty, as reconcile's DEL), a CNI_NETNS that names another netns
// (with a macvlan of the child's name and MAC there, as another pod's ipvlan
// sibling would be: left alone), a pin that goes after the netns was looked
// at. A child not proven gone (the look-up refused) is 11 with nothing given
// back, and the next DEL finishes.
func TestSharedDelByRecordedID(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name    string
		path    func(t *testing.T, pod ns.NetNS, mac string) string // CNI_NETNS of the DEL
		refused bool                                                // the first DEL's look-up runs without CAP_NET_ADMIN
		vanish  bool                                                // the pin goes once the netns was identified
	}{
		{name: "recorded path unreadable", path: loopPath},
		{name: "path names another netns", path: siblingNetns},
		{name: "look-up refused, path names the netns", path: podPath, refused: true},
		{name: "pin gone after the netns check", path: podPath, refused: true, vanish: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, conf, leases := ipamNode(t, false)
			pod := netnstest.NewNS(t)
			if err := n.run(add, pod, conf, prevResult100); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			child, ok := netnstest.Snapshot(t, pod, "rdma0")
			if !ok || leaseCount(t, leases) != 1 {
				t.Fatalf("ADD made no child or no lease")
			}
			nsPath := tt.path(t, pod, child.MAC)
			ipam := &childFirst{t: t, pod: pod, held: true}
			n.wrap = func(p *Plugin) {
				ipam.IPAM = p.env.IPAM
				p.env.IPAM = ipam
				if tt.refused {
					p.env.Links = noNetAdmin{p.env.Links}
				}
				if tt.vanish {
					p.env.Netns = vanishing{Netns: p.env.Netns, t: t}
				}
			}
			if tt.refused {
				wantCode(t, n.delAt(pod, nsPath, conf), 11, "may still hold its address")
				if _, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || leaseCount(t, leases) != 1 || len(stateFiles(t, n.dir)) != 1 || ipam.dels != 0 {
					t.Fatalf("refused DEL gave back something: child %v, leases %d, records %d, IPAM DELs %d",
						ok, leaseCount(t, leases), len(stateFiles(t, n.dir)), ipam.dels)
				}
				tt.refused = false
			}
			if err := n.delAt(pod, nsPath, conf); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if _, ok := netnstest.Snapshot(t, pod, "rdma0"); ok {
				t.Error("the pod's child is still there")
			}
			if leaseCount(t, leases) != 0 || len(stateFiles(t, n.dir)) != 0 || ipam.dels == 0 {
				t.Errorf("after DEL: leases %d, records %d, IPAM DELs %d", leaseCount(t, leases), len(stateFiles(t, n.dir)), ipam.dels)
			}
			n.assertHostRestored(t)
		})
	}
}

// podPath is the pod's own netns path.
func podPath(_ *testing.T, pod ns.NetNS, _ string) string { return pod.Path() }

// loopPath puts at pod's recorded path, in place of its pin, a symbolic
// link to itself: opening it fails (ELOOP), which names no netns nor
// proves one gone. It returns "": the DEL gets no CNI_NETNS.
func loopPath(t *testing.T, pod ns.NetNS, _ string) string {
	p := pod.Path()
	if err := netnstest.Unpin(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(p) })
	return ""
}

// siblingNetns is the path of another netns with a macvlan named rdma0
// with MAC mac (ipvlan children of one parent share name and MAC), which
// is checked to be there still when t ends.
func siblingNetns(t *testing.T, _ ns.NetNS, mac string) string {
	other := netnstest.NewNS(t)
	netnstest.AddVeth(t, other, netnstest.NewNS(t), "par0", 1400)
	err := other.Do(func(ns.NetNS) error {
		parent, err := netlink.LinkByName("par0")
		if err != nil {
			return err
		}
		hw, err := net.ParseMAC(mac)
		if err != nil {
			return err
		}
		attrs := netlink.LinkAttrs{Name: "rdma0", ParentIndex: parent.Attrs().Index, HardwareAddr: hw}
		return netlink.LinkAdd(&netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE})
	})
	if err != nil {
		t.Fatalf("sibling rdma0: %v", err)
	}
	t.Cleanup(func() {
		if l, ok := netnstest.Snapshot(t, other, "rdma0"); !ok || l.MAC != mac {
			t.Errorf("the other netns' rdma0: %+v (there %v), want it kept with MAC %s", l, ok, mac)
		}
	})
	return other.Path()
}

// vanishing is Netns with the pin of a netns removed once ID has named it.
type vanishing struct {
	Netns
	t *testing.T
}

func (v vanishing) ID(path string) (netnsid.ID, error) {
	id, err := v.Netns.ID(path)
	if err == nil {
		if uerr := netnstest.Unpin(path); uerr != nil {
			v.t.Error(uerr)
		}
	}
	return id, err
}

// delAt runs DEL of pod's attachment with CNI_NETNS nsPath.
func (n *node) delAt(pod ns.NetNS, nsPath, conf string) error {
	args := cmd(n.dir, conf, "")
	args.Path = n.cniPath
	args.ContainerID = "ctr-" + pod.Path()[len(pod.Path())-8:]
	args.Netns = nsPath
	return n.host.Do(func(ns.NetNS) error { return n.plugin().Del(args) })
}

// childFirst is the IPAM, checking at each DEL that a held pod netns has
// no rdma0 any more: the lease goes only after the child.
type childFirst struct {
	addr.IPAM
	t    *testing.T
	pod  ns.NetNS
	held bool
	dels int
}

func (c *childFirst) Del(ctx context.Context, r addr.Request) error {
	c.dels++
	if c.held {
		if _, ok := netnstest.Snapshot(c.t, c.pod, "rdma0"); ok {
			c.t.Error("the IPAM's DEL ran while the pod's child still existed")
		}
	}
	return c.IPAM.Del(ctx, r)
}

// noNetAdmin is Links with DelChild and DelChildByID run without
// CAP_NET_ADMIN.
type noNetAdmin struct{ Links }

func (l noNetAdmin) DelChild(podNSPath, name, expectMAC string) error {
	return netnstest.WithoutNetAdmin(func() error { return l.Links.DelChild(podNSPath, name, expectMAC) })
}

func (l noNetAdmin) DelChildByID(id netdev.ChildID, expectMAC string) error {
	return netnstest.WithoutNetAdmin(func() error { return l.Links.DelChildByID(id, expectMAC) })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExclusiveRestoreAfterNetnsGone checks that DEL finds the netdev by
// MAC when the pod netns is gone before DEL and the kernel refunded the
// netdev under another name (as it does for physical netdevs).
func TestExclusiveRestoreAfterNetnsGone(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	pod := netnstest.NewNS(t)
	if err := n.run(add, pod, podAll, prevResult100); err != nil {
		t.Fatal(err)
	}
	refund(t, pod, n.host, "rdma0", "dev7")
	netnstest.Delete(pod)
	if err := n.run(del, pod, podAll, ""); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertHostRestored(t)
	if f := stateFiles(t, n.dir); len(f) != 0 {
		t.Errorf("state left %v", f)
	}
}

// refund moves name from pod back to host renamed to newName, as the kernel
// does with a physical netdev when its netns dies.
func refund(t *testing.T, pod, host ns.NetNS, name, newName string) {
	t.Helper()
	err := pod.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, newName); err != nil {
			return err
		}
		return netlink.LinkSetNsFd(l, int(host.Fd()))
	})
	if err != nil {
		t.Fatalf("refund %s: %v", name, err)
	}
}

// TestExclusiveNetdevDestroyedWithNetns checks that a virtual netdev is
// destroyed with the netns: DEL still succeeds and forgets the
// attachment.
func TestExclusiveNetdevDestroyedWithNetns(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	pod := netnstest.NewNS(t)
	if err := n.run(add, pod, podAll, prevResult100); err != nil {
		t.Fatal(err)
	}
	netnstest.Delete(pod)
	if err := n.run(del, pod, podAll, ""); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if f := stateFiles(t, n.dir); len(f) != 0 {
		t.Errorf("state left %v", f)
	}
}
