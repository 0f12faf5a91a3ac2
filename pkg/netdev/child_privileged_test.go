package netdev

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

func macvlanSpec() ChildSpec {
	return ChildSpec{Kind: "macvlan", Mode: "bridge", Parent: rdmaName, PodName: podIf}
}

func TestAddDelChildMacvlan(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name    string
		mtu     int
		wantMTU int
	}{{"parent MTU", 0, rdmaMTU}, {"own MTU", 1300, 1300}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			parent := e.makeRDMA(t, true)
			spec := macvlanSpec()
			spec.MTU = tt.mtu
			c, err := e.addChild(spec)
			if err != nil {
				t.Fatalf("AddChild: %v", err)
			}
			s := snap(t, e.pod, podIf)
			if !s.Up || s.Type != "macvlan" || s.MAC != c.MAC || s.MTU != tt.wantMTU || c.Name != podIf || c.Index == 0 {
				t.Errorf("child %+v, pod link %+v", c, s)
			}
			wantSame(t, "parent", parent, snap(t, e.host, rdmaName))
			wantAbsent(t, e.host, podIf, "host")
			for i := range 2 {
				if err := DelChild(e.pod.Path(), podIf, c.MAC); err != nil {
					t.Fatalf("DelChild #%d: %v", i+1, err)
				}
				wantAbsent(t, e.pod, podIf, "pod")
			}
			wantSame(t, "parent", parent, snap(t, e.host, rdmaName))
		})
	}
}

func TestAddChildNameExistsInPod(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	parent := e.makeRDMA(t, true)
	addVeth(t, e.pod, podIf, e.peer, "peer1")
	before := snap(t, e.pod, podIf)
	if _, err := e.addChild(macvlanSpec()); err == nil {
		t.Fatal("AddChild succeeded although the pod has net1")
	}
	wantSame(t, "pod's own net1", before, snap(t, e.pod, podIf))
	wantSame(t, "parent", parent, snap(t, e.host, rdmaName))
}

// TestAddChildUpRefused checks that AddChild creates the child up in one
// request and leaves a failed up to the kernel, which unregisters the new
// link. A macvlan carrying its parent's MAC is refused at the up
// (EADDRINUSE): the request fails and nothing is left in the pod.
func TestAddChildUpRefused(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	parent := e.makeRDMA(t, true)
	h := handle(t, e.host)
	pl, err := h.LinkByName(rdmaName)
	if err != nil {
		t.Fatal(err)
	}
	link, err := childLink(macvlanSpec(), pl.Attrs().Index, int(e.pod.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	link.Attrs().HardwareAddr = pl.Attrs().HardwareAddr
	if err := h.LinkAdd(link); !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("LinkAdd of a macvlan up with its parent's MAC = %v, want EADDRINUSE", err)
	}
	wantAbsent(t, e.pod, podIf, "pod")
	wantSame(t, "parent", parent, snap(t, e.host, rdmaName))
}

func TestDelChildRefuses(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	e.makeRDMA(t, true)
	c, err := e.addChild(macvlanSpec())
	if err != nil {
		t.Fatalf("AddChild: %v", err)
	}
	if err := DelChild(e.pod.Path(), podIf, "02:00:00:00:00:01"); err == nil {
		t.Error("DelChild with a wrong MAC succeeded")
	}
	addVeth(t, e.pod, "eth0", e.peer, "peer1")
	if err := DelChild(e.pod.Path(), "eth0", ""); err == nil {
		t.Error("DelChild deleted a veth")
	}
	if s := snap(t, e.pod, podIf); !s.Exists || s.MAC != c.MAC {
		t.Errorf("child after refused delete: %+v", s)
	}
	wantPresent := snap(t, e.pod, "eth0")
	if !wantPresent.Exists {
		t.Error("pod eth0 deleted")
	}
}

func TestDelChildNetnsGone(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	e.makeRDMA(t, true)
	c, err := e.addChild(macvlanSpec())
	if err != nil {
		t.Fatalf("AddChild: %v", err)
	}
	path := e.pod.Path()
	netnstest.Delete(e.pod)
	for _, p := range []string{path, ""} {
		if err := DelChild(p, podIf, c.MAC); err != nil {
			t.Errorf("DelChild(%q) = %v, want nil", p, err)
		}
	}
}

// TestAddChildIpvlan checks that where the kernel has ipvlan the child is
// an ipvlan in the pod and DelChild removes it; where it has not (this
// project's development and CI machines) AddChild says ErrKindUnsupported
// and leaves nothing. Either way the parent is untouched.
func TestAddChildIpvlan(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	parent := e.makeRDMA(t, true)
	spec := ChildSpec{Kind: "ipvlan", Mode: "l2", Parent: rdmaName, PodName: podIf}
	c, err := e.addChild(spec)
	mods, _ := os.ReadFile("/proc/modules")
	switch {
	case err == nil:
		if s := snap(t, e.pod, podIf); !s.Up || s.Type != "ipvlan" || s.MAC != c.MAC || c.Name != podIf {
			t.Errorf("child %+v, pod link %+v", c, s)
		}
		if err := DelChild(e.pod.Path(), podIf, c.MAC); err != nil {
			t.Fatalf("DelChild: %v", err)
		}
	case strings.Contains(string(mods), "ipvlan "):
		t.Fatalf("ipvlan module loaded but AddChild failed: %v", err)
	case !errors.Is(err, ErrKindUnsupported):
		t.Fatalf("AddChild(ipvlan) = %v, want ErrKindUnsupported", err)
	}
	wantAbsent(t, e.pod, podIf, "pod")
	wantSame(t, "parent", parent, snap(t, e.host, rdmaName))
}

func TestCheckInPod(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	e.makeRDMA(t, true)
	c, err := e.addChild(macvlanSpec())
	if err != nil {
		t.Fatalf("AddChild: %v", err)
	}
	addVeth(t, e.pod, "down0", e.peer, "peer1") // created down
	down := snap(t, e.pod, "down0")
	tests := []struct {
		name, path, ifname, mac string
		ok                      bool
	}{
		{"ok", e.pod.Path(), podIf, c.MAC, true},
		{"ok upper-case MAC", e.pod.Path(), podIf, strings.ToUpper(c.MAC), true},
		{"missing", e.pod.Path(), "nope0", c.MAC, false},
		{"wrong MAC", e.pod.Path(), podIf, "02:00:00:00:00:01", false},
		{"down", e.pod.Path(), "down0", down.MAC, false},
		{"no netns", "/run/netns/does-not-exist", podIf, c.MAC, false},
	}
	for _, tt := range tests {
		err := CheckInPod(tt.path, tt.ifname, tt.mac)
		if (err == nil) != tt.ok {
			t.Errorf("%s: CheckInPod = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// TestDelChildByID checks that, with its netns pin removed, a child is
// found from the host netns through the host's nsid of its netns and its
// ifindex there: deleted while a holder keeps the netns alive, proven gone
// when the netns died (also when another netns got its nsid and has a link
// at that index), and ErrUnproven, the child kept, when the kernel refuses
// the look-up.
func TestDelChildByID(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name     string
		after    func(t *testing.T, e *env, c Child, id ChildID) // the pin removed
		noAdmin  bool
		wantErr  error
		wantKept bool // the child is still in the pod's (held) netns
	}{
		{name: "netns held", after: func(*testing.T, *env, Child, ChildID) {}},
		{name: "netns died", after: func(_ *testing.T, e *env, _ Child, _ ChildID) { _ = e.pod.Close() }},
		{name: "nsid given again", after: giveIDAgain, wantErr: ErrUnproven}, // a child kind at the index, another MAC
		{name: "look-up refused", after: func(*testing.T, *env, Child, ChildID) {}, noAdmin: true, wantErr: ErrUnproven, wantKept: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.makeRDMA(t, true)
			c, err := e.addChild(macvlanSpec())
			if err != nil {
				t.Fatalf("AddChild: %v", err)
			}
			if c.NetnsID == nil || c.Index < childIndexMin {
				t.Fatalf("child %+v: no nsid or an index of the netns' own", c)
			}
			id := ChildID{NetnsID: *c.NetnsID, Index: c.Index}
			if got := nsidOf(t, e.host, e.pod); got != int(id.NetnsID) {
				t.Fatalf("host's nsid of the pod netns %d, AddChild said %d", got, id.NetnsID)
			}
			path := e.pod.Path()
			if err := netnstest.Unpin(path); err != nil {
				t.Fatal(err)
			}
			tt.after(t, e, c, id)
			err = e.inHost(func() error {
				if tt.noAdmin {
					return netnstest.WithoutNetAdmin(func() error { return DelChildByID(id, c.MAC) })
				}
				return DelChildByID(id, c.MAC)
			})
			t.Logf("DelChildByID: %v", err)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("DelChildByID = %v, want %v", err, tt.wantErr)
			}
			if tt.name == "netns held" || tt.wantKept {
				if s := snap(t, e.pod, podIf); s.Exists != tt.wantKept {
					t.Errorf("child in the held netns: %+v, want kept %v", s, tt.wantKept)
				}
			}
			if tt.wantErr == nil { // again: no link at the index (ENODEV) or no netns (EINVAL)
				if err := e.inHost(func() error { return DelChildByID(id, c.MAC) }); err != nil {
					t.Errorf("DelChildByID again = %v", err)
				}
			}
		})
	}
}

// giveIDAgain waits until the dead pod netns' nsid is free, gives it to a
// new netns with a macvlan of another MAC at the child's index, and checks
// after the test that DelChildByID left that one alone.
func giveIDAgain(t *testing.T, e *env, c Child, id ChildID) {
	_ = e.pod.Close()
	other := netnstest.NewNS(t)
	h := handle(t, e.host)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := h.SetNetNsIdByFd(int(other.Fd()), int(id.NetnsID))
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || time.Now().After(deadline) {
			t.Fatalf("give nsid %d to a new netns: %v", id.NetnsID, err)
		}
		runtime.Gosched() // the kernel frees it when it has destroyed the netns
	}
	addVeth(t, other, "v0", e.peer, "peer9")
	oh := handle(t, other)
	v0, err := oh.LinkByName("v0")
	if err != nil {
		t.Fatal(err)
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.ParentIndex, attrs.Index = podIf, v0.Attrs().Index, c.Index
	if err := oh.LinkAdd(&netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := oh.LinkByIndex(c.Index); err != nil || l.Attrs().Name != podIf {
			t.Errorf("the other netns' link at index %d: %v, %v", c.Index, l, err)
		}
	})
}

// nsidOf is host's nsid of n, -1 for none.
func nsidOf(t *testing.T, host, n ns.NetNS) int {
	t.Helper()
	id, err := handle(t, host).GetNetNsIdByFd(int(n.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAddChildIndexTaken checks that a child whose drawn ifindex the pod
// netns has already (a veth there) is created at the next draw, whatever
// errno this kernel refuses the first with; when every draw is taken
// AddChild fails after three and leaves nothing in the pod.
func TestAddChildIndexTaken(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name    string
		taken   int // draws the pod netns has already, from the first
		wantIdx int // the child's index, 0: AddChild fails
	}{
		{name: "first draw taken", taken: 1, wantIdx: childIndexMin + 2},
		{name: "every draw taken", taken: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.makeRDMA(t, true)
			for i := 1; i <= tt.taken; i++ {
				addVethAt(t, e, childIndexMin+i)
			}
			next := childIndexMin
			setDraw(t, func() int { next++; return next })
			c, err := e.addChild(macvlanSpec())
			t.Logf("AddChild: %+v, %v", c, err)
			if tt.wantIdx == 0 {
				if err == nil || !childIndexTaken(err) {
					t.Errorf("AddChild = %v, want the kernel's ifindex clash", err)
				}
				wantAbsent(t, e.pod, podIf, "pod")
				return
			}
			if err != nil {
				t.Fatalf("AddChild: %v", err)
			}
			if s := snap(t, e.pod, podIf); !s.Exists || c.Index != tt.wantIdx || s.Type != "macvlan" {
				t.Errorf("child %+v (pod link %+v), want a macvlan at index %d", c, s, tt.wantIdx)
			}
		})
	}
}

// addVethAt creates a veth in e's pod netns at ifindex index (its peer in
// e's peer netns).
func addVethAt(t *testing.T, e *env, index int) {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.Index = fmt.Sprintf("held%d", index-childIndexMin), index
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: fmt.Sprintf("peer%d", index-childIndexMin+10),
		PeerNamespace: netlink.NsFd(int(e.peer.Fd()))}
	if err := handle(t, e.pod).LinkAdd(v); err != nil {
		t.Fatalf("veth at index %d in the pod: %v", index, err)
	}
}
