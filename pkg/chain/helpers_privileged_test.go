package chain

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// node is a throwaway host netns whose veth ens9 stands in for the netdev of
// RDMA device rxe0; the RDMA calls stay behind the fake seam (this kernel has
// no RDMA), every netdev operation is real.
type node struct {
	host, peer ns.NetNS
	w          *world
	dir        string
	before     netnstest.Link
	cniPath    string        // set: the real IPAM plugins found there are used
	wrap       func(*Plugin) // set: changes the plugin's seams before each call
}

const hostDev = "ens9"

func newNode(t *testing.T, mode rdma.Mode) *node {
	t.Helper()
	testenv.Privileged(t)
	n := &node{host: netnstest.NewNS(t), peer: netnstest.NewNS(t), dir: t.TempDir()}
	netnstest.AddVeth(t, n.host, n.peer, hostDev, 1400, "192.0.2.10/24", "fd00:1::10/64")
	// Routes the kernel does not re-create: main, a per-NIC table, IPv6.
	netnstest.AddRoute(t, n.host, hostDev, "198.51.100.0/24", "192.0.2.1", 0, 0)
	netnstest.AddRoute(t, n.host, hostDev, "0.0.0.0/0", "192.0.2.1", 100, 0)
	netnstest.AddRoute(t, n.host, hostDev, "fd00:99::/64", "fd00:1::1", 0, 50)
	n.before, _ = netnstest.Snapshot(t, n.host, hostDev)
	if len(n.before.Routes) != 3 {
		t.Fatalf("routes set up: %v", n.before.Routes)
	}
	n.w = &world{mode: mode, devices: []rdma.Device{rxe("rxe0", hostDev)}}
	return n
}

func (n *node) plugin() *Plugin {
	p := n.w.plugin()
	p.env.Links = kernelLinks{}
	p.env.Netns = kernelNetns{}
	if n.cniPath != "" {
		p.env.IPAM, p.env.Addrs = addr.Exec(), kernelAddrs{}
	}
	if n.wrap != nil {
		n.wrap(p)
	}
	return p
}

// run executes verb with the thread in the node's host netns.
func (n *node) run(verb func(*Plugin) func(*skel.CmdArgs) error, pod ns.NetNS, conf, prev string) error {
	return n.runAt("1.0.0", verb, pod, conf, prev)
}

// runAt is run with the conf at CNI version ver.
func (n *node) runAt(ver string, verb func(*Plugin) func(*skel.CmdArgs) error, pod ns.NetNS, conf, prev string) error {
	args := cmd(n.dir, conf, prev)
	args.StdinData = []byte(strings.Replace(string(args.StdinData), `"1.0.0"`, `"`+ver+`"`, 1))
	args.Path = n.cniPath
	args.Netns = ""
	if pod != nil {
		args.Netns = pod.Path()
		args.ContainerID = "ctr-" + pod.Path()[len(pod.Path())-8:]
	}
	n.w.stdout.Reset()
	return n.host.Do(func(ns.NetNS) error { return verb(n.plugin())(args) })
}

func add(p *Plugin) func(*skel.CmdArgs) error   { return p.Add }
func del(p *Plugin) func(*skel.CmdArgs) error   { return p.Del }
func check(p *Plugin) func(*skel.CmdArgs) error { return p.Check }
func gc(p *Plugin) func(*skel.CmdArgs) error    { return p.GC }

// assertHostRestored checks ens9 is back in the host exactly as it was.
func (n *node) assertHostRestored(t *testing.T) {
	t.Helper()
	got, ok := netnstest.Snapshot(t, n.host, hostDev)
	if !ok || !reflect.DeepEqual(got, n.before) {
		t.Errorf("host %s = %+v (present %v), want %+v", hostDev, got, ok, n.before)
	}
}

const podAll = `,"podSelection":"all"`

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
