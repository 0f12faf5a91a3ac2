package chain

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// hostDo runs f in the node's host netns and fails the test on an error.
func (n *node) hostDo(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := n.host.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// defaultVia adds a main-table default route through dev via gw, with
// preferred source src when given.
func defaultVia(dev, dst, gw, src string) func() error {
	return func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		_, d, _ := net.ParseCIDR(dst)
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: d, Gw: net.ParseIP(gw), Src: net.ParseIP(src)})
	}
}

// upper creates link (a bridge or a macvlan of ens9) in the host with addr,
// makes ens9 its port when it is a bridge, and sets it up.
func upper(link netlink.Link, addr string) func() error {
	return func() error {
		if err := netlink.LinkAdd(link); err != nil {
			return err
		}
		if br, ok := link.(*netlink.Bridge); ok {
			port, err := netlink.LinkByName(hostDev)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMaster(port, br); err != nil {
				return err
			}
		}
		l, err := netlink.LinkByName(link.Attrs().Name)
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(addr)
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}
}

// TestExclusiveNeverMovesTheNodeUplink checks that exclusive mode never
// moves the netdev that carries the node's own traffic, on the real
// kernel: the host netns of each case is given a default route (or the
// node's address) on ens9 or above it, and ADD is refused with 110 naming
// what ens9 carries; ens9, its addresses and its routes stay, nothing is
// recorded or moved, and DEL has nothing to do. A default route through
// another netdev leaves ens9 movable.
func TestExclusiveNeverMovesTheNodeUplink(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name  string
		conf  string // the entry's keys beyond podAll
		setup func(t *testing.T, n *node)
		words []string // nil: ADD succeeds
	}{
		{"IPv4 default route", "", func(t *testing.T, n *node) {
			n.hostDo(t, "route", defaultVia(hostDev, "0.0.0.0/0", "192.0.2.1", ""))
		}, []string{"netdev ens9 of RDMA device rxe0 carries the node's IPv4 default route"}},
		{"IPv6 default route", "", func(t *testing.T, n *node) {
			n.hostDo(t, "route", defaultVia(hostDev, "::/0", "fd00:1::1", ""))
		}, []string{"ens9", "the node's IPv6 default route"}},
		{"node address, source of a default route through another netdev", "", func(t *testing.T, n *node) {
			netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
			n.hostDo(t, "route", defaultVia("ens8", "0.0.0.0/0", "198.18.0.1", "192.0.2.10"))
		}, []string{"ens9", "the node's address 192.0.2.10"}},
		{"port of a bridge carrying the default route", "", func(t *testing.T, n *node) {
			n.hostDo(t, "bridge", upper(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br8"}}, "203.0.113.5/24"))
			n.hostDo(t, "route", defaultVia("br8", "0.0.0.0/0", "203.0.113.1", ""))
		}, []string{"ens9", "IPv4 default route (through its upper netdev br8)"}},
		{"under a macvlan carrying the default route", "", func(t *testing.T, n *node) {
			n.hostDo(t, "macvlan", func() error {
				l, err := netlink.LinkByName(hostDev)
				if err != nil {
					return err
				}
				mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv8", ParentIndex: l.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}
				return upper(mv, "203.0.113.6/24")()
			})
			n.hostDo(t, "route", defaultVia("mv8", "0.0.0.0/0", "203.0.113.1", ""))
		}, []string{"ens9", "(through its upper netdev mv8)"}},
		{"default route through another netdev", "", func(t *testing.T, n *node) {
			netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
			n.hostDo(t, "route", defaultVia("ens8", "0.0.0.0/0", "198.18.0.1", ""))
		}, nil},
		// kubelet --node-ip on a netdev no default route uses: only
		// nodeAddresses shows it.
		{"IPv4 node address of nodeAddresses", `,"nodeAddresses":["192.0.2.10"]`, func(t *testing.T, n *node) {
			netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
			n.hostDo(t, "route", defaultVia("ens8", "0.0.0.0/0", "198.18.0.1", ""))
		}, []string{"netdev ens9 of RDMA device rxe0 carries the node's address 192.0.2.10 (nodeAddresses)"}},
		{"IPv6 node address of nodeAddresses, no default route", `,"nodeAddresses":["198.18.7.7","fd00:1::10"]`, func(*testing.T, *node) {},
			[]string{"ens9", "the node's address fd00:1::10 (nodeAddresses)"}},
		{"node address of nodeAddresses on a bridge above", `,"nodeAddresses":["203.0.113.5"]`, func(t *testing.T, n *node) {
			n.hostDo(t, "bridge", upper(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br8"}}, "203.0.113.5/24"))
		}, []string{"ens9", "the node's address 203.0.113.5 (nodeAddresses) (through its upper netdev br8)"}},
		{"node address of nodeAddresses on another netdev", `,"nodeAddresses":["198.18.0.2"]`, func(t *testing.T, n *node) {
			netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, rdma.ModeExclusive)
			tt.setup(t, n)
			before, _ := netnstest.Snapshot(t, n.host, hostDev)
			pod := netnstest.NewNS(t)
			conf := podAll + tt.conf
			err := n.run(add, pod, conf, prevResult100)
			if tt.words == nil {
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				if err := n.run(del, pod, conf, ""); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if got, _ := netnstest.Snapshot(t, n.host, hostDev); !reflect.DeepEqual(got, before) {
					t.Errorf("ens9 after DEL = %+v, want %+v", got, before)
				}
				return
			}
			for _, w := range tt.words {
				wantCode(t, err, CodeNodeUplink, w)
			}
			if got, ok := netnstest.Snapshot(t, n.host, hostDev); !ok || !reflect.DeepEqual(got, before) {
				t.Errorf("ens9 = %+v (present %v), want it untouched: %+v", got, ok, before)
			}
			if names := netnstest.Names(t, pod); !reflect.DeepEqual(names, []string{"lo"}) {
				t.Errorf("pod netdevs = %v", names)
			}
			if f := stateFiles(t, n.dir); len(f) != 0 {
				t.Errorf("a refused ADD left records %v", f)
			}
			if got := filterCalls(n.w.calls, "MoveToNetns"); len(got) != 0 {
				t.Errorf("RDMA device moved: %v", n.w.calls)
			}
			if err := n.run(del, pod, conf, ""); err != nil {
				t.Errorf("DEL: %v", err)
			}
		})
	}
}

// TestExclusivePicksPastTheNodeUplink checks that, with no device named,
// a free device on a netdev that carries nothing of the node's is picked
// before the node's uplink.
func TestExclusivePicksPastTheNodeUplink(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
	n.hostDo(t, "route", defaultVia(hostDev, "0.0.0.0/0", "192.0.2.1", ""))
	n.w.devices = []rdma.Device{rxe("rxe0", hostDev), rxe("rxe1", "ens8")}
	pod := netnstest.NewNS(t)
	if err := n.run(add, pod, podAll, prevResult100); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got := filterCalls(n.w.calls, "MoveToNetns"); !reflect.DeepEqual(got, []string{"MoveToNetns rxe1"}) {
		t.Errorf("moved %v, want rxe1 only", got)
	}
	if _, ok := netnstest.Snapshot(t, n.host, hostDev); !ok {
		t.Error("the node's uplink ens9 left the host")
	}
	if err := n.run(del, pod, podAll, ""); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if names := strings.Join(netnstest.Names(t, n.host), " "); !strings.Contains(names, "ens8") {
		t.Errorf("ens8 not back: %s", names)
	}
}

// TestExclusiveWaitsPastTheNodeUplink checks that a pod that names no
// device, while the only free one is the node's uplink (here by
// nodeAddresses) and another pod holds the rest, waits: 11 naming the
// holder, nothing moved; once the holder's DEL gives its device back,
// the next try gets it.
func TestExclusiveWaitsPastTheNodeUplink(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	netnstest.AddVeth(t, n.host, n.peer, "ens8", 1500, "198.18.0.2/24")
	n.w.devices = []rdma.Device{rxe("rxe0", hostDev), rxe("rxe1", "ens8")}
	conf := podAll + `,"nodeAddresses":["192.0.2.10"]`
	first, second := netnstest.NewNS(t), netnstest.NewNS(t)
	if err := n.run(add, first, conf, prevResult100); err != nil {
		t.Fatalf("first ADD: %v", err)
	}
	err := n.run(add, second, conf, prevResult100)
	for _, w := range []string{"attached to another pod (rxe1 by ctr-", "try again", "netdev ens9 of rxe0 carries the node's address 192.0.2.10 (nodeAddresses)"} {
		wantCode(t, err, 11, w)
	}
	if got := filterCalls(n.w.calls, "MoveToNetns"); !reflect.DeepEqual(got, []string{"MoveToNetns rxe1"}) {
		t.Errorf("moved %v, want rxe1 only", got)
	}
	if names := netnstest.Names(t, second); !reflect.DeepEqual(names, []string{"lo"}) {
		t.Errorf("the waiting pod's netdevs = %v", names)
	}
	if err := n.run(del, second, conf, ""); err != nil {
		t.Fatalf("the waiting pod's DEL: %v", err)
	}
	if err := n.run(del, first, conf, ""); err != nil {
		t.Fatalf("first DEL: %v", err)
	}
	if err := n.run(add, second, conf, prevResult100); err != nil {
		t.Fatalf("second ADD after the first's DEL: %v", err)
	}
	if names := strings.Join(netnstest.Names(t, second), " "); !strings.Contains(names, "rdma0") {
		t.Errorf("second pod's netdevs: %s", names)
	}
	if err := n.run(del, second, conf, ""); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	n.assertHostRestored(t)
}
