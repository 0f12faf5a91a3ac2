package netdev

import (
	"errors"
	"os"
	"strings"
	"testing"

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

// TestAddChildUpRefused: AddChild creates the child up in one request and
// leaves a failed up to the kernel, which unregisters the new link. A
// macvlan carrying its parent's MAC is refused at the up (EADDRINUSE): the
// request fails and nothing is left in the pod.
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

// TestAddChildIpvlan: where the kernel has ipvlan the child is an ipvlan in
// the pod and DelChild removes it; where it has not (this project's
// development and CI machines) AddChild says ErrKindUnsupported and leaves
// nothing. Either way the parent is untouched.
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
