package netdev

import (
	"net"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const (
	rdmaName = "rdma0"
	podIf    = "net1"
	rdmaMTU  = 1400
	rdmaV4   = "192.0.2.10/24"
	rdmaV6   = "fd00:1::10/64"
)

// env is one test case's netns set: host (where the code under test runs),
// pod, and peer (holding the veth peer of the RDMA stand-in).
type env struct {
	host, pod, peer ns.NetNS
}

// newEnv creates fresh netns and removes them when t ends.
func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.Privileged(t)
	return &env{host: netnstest.NewNS(t), pod: netnstest.NewNS(t), peer: netnstest.NewNS(t)}
}

// handle returns a netlink handle in n, closed when t ends. NETLINK_ROUTE
// only: the VM tier's kernels have no xfrm_user or nfnetlink.
func handle(t *testing.T, n ns.NetNS) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(int(n.Fd())), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// inHost runs f with the calling thread in the test's host netns.
func (e *env) inHost(f func() error) error {
	return e.host.Do(func(ns.NetNS) error { return f() })
}

// addVeth creates veth name in n with its peer peerName in peerNS.
func addVeth(t *testing.T, n ns.NetNS, name string, peerNS ns.NetNS, peerName string) netlink.Link {
	t.Helper()
	h := handle(t, n)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = name, rdmaMTU
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: peerName, PeerNamespace: netlink.NsFd(int(peerNS.Fd()))}
	if err := h.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// makeRDMA creates the RDMA netdev stand-in rdma0 in the host netns: a veth
// (peer in the peer netns), MTU 1400, an IPv4 /24 and an IPv6 /64 (nodad).
func (e *env) makeRDMA(t *testing.T, up bool) snapshot {
	t.Helper()
	l := addVeth(t, e.host, rdmaName, e.peer, "peer0")
	h := handle(t, e.host)
	for _, c := range []string{rdmaV4, rdmaV6} {
		a, _ := netlink.ParseAddr(c)
		a.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(l, a); err != nil {
			t.Fatalf("add %s: %v", c, err)
		}
	}
	if up {
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return snap(t, e.host, rdmaName)
}

// snapshot is the observable kernel state of one link.
type snapshot struct {
	Exists bool
	Name   string
	MAC    string
	MTU    int
	Up     bool
	Alias  string
	Type   string
	Addrs  []string // non-link-local, sorted
}

// snap reads link name in n; Exists is false when it is missing.
func snap(t *testing.T, n ns.NetNS, name string) snapshot {
	t.Helper()
	h := handle(t, n)
	l, err := h.LinkByName(name)
	if isNotFound(err) {
		return snapshot{Name: name}
	}
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	addrs, err := nldump.AddrList(h, l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var cidrs []string
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			cidrs = append(cidrs, a.IPNet.String())
		}
	}
	slices.Sort(cidrs)
	a := l.Attrs()
	return snapshot{Exists: true, Name: a.Name, MAC: a.HardwareAddr.String(), MTU: a.MTU,
		Up: a.Flags&net.FlagUp != 0, Alias: a.Alias, Type: l.Type(), Addrs: cidrs}
}

// equal reports whether two snapshots match.
func (s snapshot) equal(o snapshot) bool {
	return s.Exists == o.Exists && s.Name == o.Name && s.MAC == o.MAC && s.MTU == o.MTU &&
		s.Up == o.Up && s.Alias == o.Alias && slices.Equal(s.Addrs, o.Addrs)
}

// wantSame fails t when the link's state differs from before.
func wantSame(t *testing.T, what string, before, now snapshot) {
	t.Helper()
	if !before.equal(now) {
		t.Errorf("%s changed:\n before %+v\n now    %+v", what, before, now)
	}
}

// wantAbsent fails t when link name exists in n.
func wantAbsent(t *testing.T, n ns.NetNS, name, where string) {
	t.Helper()
	if s := snap(t, n, name); s.Exists {
		t.Errorf("%s in %s should not exist: %+v", name, where, s)
	}
}

// move moves hostName into the pod as podName the way ADD does, in the
// host netns: Describe, then MoveToPod. hl is what a failed move's undo
// (restore) gets.
func (e *env) move(hostName, podName string) (hl state.HostLink, err error) {
	err = e.inHost(func() error {
		if hl, err = Describe(hostName, podName); err != nil {
			return err
		}
		return MoveToPod(hl, e.pod)
	})
	return hl, err
}

// restore runs RestoreToHost in the host netns.
func (e *env) restore(hl state.HostLink, podPath string) error {
	return e.inHost(func() error { return RestoreToHost(hl, podPath) })
}

// addChild runs AddChild in the host netns.
func (e *env) addChild(spec ChildSpec) (Child, error) {
	var c Child
	err := e.inHost(func() (err error) {
		c, err = AddChild(spec, e.pod)
		return err
	})
	return c, err
}
