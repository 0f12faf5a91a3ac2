package chain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func TestExclusiveMoveAndExactRestore(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	pod := netnstest.NewNS(t)
	if err := n.run(add, pod, podAll, prevResult100); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	result := n.w.stdout.String()
	inPod, ok := netnstest.Snapshot(t, pod, "rdma0")
	if !ok || inPod.MAC != n.before.MAC || !inPod.Up || inPod.MTU != 1400 || len(inPod.Addrs) != 0 {
		t.Errorf("pod rdma0 = %+v (present %v): want the host netdev, up, without host addresses", inPod, ok)
	}
	if _, ok := netnstest.Snapshot(t, n.host, hostDev); ok {
		t.Error("netdev still in the host")
	}
	if want := []string{"MoveToNetns rxe0"}; !reflect.DeepEqual(filterCalls(n.w.calls, "MoveToNetns"), want) {
		t.Errorf("RDMA device not moved after the netdev: %v", n.w.calls)
	}
	if err := n.run(check, pod, podAll, result); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := n.run(del, pod, podAll, ""); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	n.assertHostRestored(t)
	if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
		t.Errorf("pod keeps %v", got)
	}
	if got := filterCalls(n.w.calls, "ReturnToHost"); len(got) != 1 {
		t.Errorf("RDMA device returned %d times: %v", len(got), n.w.calls)
	}
}

// TestExclusiveDriverCannotMove checks that a device of a driver that
// cannot change netns (soft-RoCE and others) gets code 102 and its
// netdev goes back exactly.
func TestExclusiveDriverCannotMove(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	n.w.failOn = map[string]error{"MoveToNetns": &rdma.UnsupportedMoveError{Device: "rxe0", Driver: "rdma_rxe", Err: errors.New("operation not supported")}}
	pod := netnstest.NewNS(t)
	wantCode(t, n.run(add, pod, podAll, prevResult100), CodeMoveUnsupported, "rxe0")
	n.assertHostRestored(t)
	if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
		t.Errorf("pod keeps %v", got)
	}
	if f := stateFiles(t, n.dir); len(f) != 0 {
		t.Errorf("state left %v", f)
	}
}

// TestExclusiveSoftRoCERefusedUpFront checks that soft-RoCE is refused
// before the netdev moves: moving an rxe netdev to another netns would
// make the kernel destroy the rxe device.
func TestExclusiveSoftRoCERefusedUpFront(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	n.w.failOn = map[string]error{"CheckMovable": rdma.CheckMovable(rxe("rxe0", hostDev), "6.12.0")}
	pod := netnstest.NewNS(t)
	wantCode(t, n.run(add, pod, podAll, prevResult100), CodeMoveUnsupported, "rdma_rxe")
	n.assertHostRestored(t)
	if got := filterCalls(n.w.calls, "MoveToNetns"); len(got) != 0 {
		t.Errorf("tried to move: %v", n.w.calls)
	}
}

// blindLinks is the kernel's links with a NetnsLocal that sees nothing, as
// on a kernel whose netns-local netdev has a kind the plugin does not know.
type blindLinks struct{ kernelLinks }

func (blindLinks) NetnsLocal(string) (string, error) { return "", nil }

// bridgeNode is a node whose RDMA device rxe0 is bound to bridge br9, which
// the kernel keeps in its netns, with two ports carrying its MAC (as a
// bond's slaves carry the bond's).
func bridgeNode(t *testing.T) *node {
	t.Helper()
	n := newNode(t, rdma.ModeExclusive)
	n.w.devices = []rdma.Device{rxe("rxe0", "br9")}
	err := n.host.Do(func(ns.NetNS) error {
		hw, _ := net.ParseMAC("02:00:00:00:bb:01")
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9", HardwareAddr: hw}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		for _, port := range []string{"ens9", "ens10"} {
			if port == "ens10" {
				netnstest.AddVeth(t, n.host, n.peer, port, 1400)
			}
			l, err := netlink.LinkByName(port)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
				return err
			}
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(br)
	})
	if err != nil {
		t.Fatalf("bridge: %v", err)
	}
	n.before, _ = netnstest.Snapshot(t, n.host, "br9")
	return n
}

// TestExclusiveNetnsLocalNetdev checks that an exclusive-mode device on a
// netdev that cannot leave the host netns is refused before anything is
// recorded or moved, with 102 naming it and why. Were the refusal to miss
// it, the kernel's refusal of the move (EINVAL) must still leave no record,
// and DEL nothing to be stuck on.
func TestExclusiveNetnsLocalNetdev(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name  string
		links Links
		code  uint
		words []string
	}{
		{"refused up front", kernelLinks{}, CodeMoveUnsupported, []string{"br9", "bridge", "shared mode"}},
		{"move refused by the kernel", blindLinks{}, CodeLinkSetup, []string{"br9", "invalid argument"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := bridgeNode(t)
			pod := netnstest.NewNS(t)
			p := n.plugin()
			p.env.Links = tt.links
			args := cmd(n.dir, podAll, prevResult100)
			args.Netns, args.ContainerID = pod.Path(), "ctr-bridge"
			err := n.host.Do(func(ns.NetNS) error { return p.Add(args) })
			for _, w := range tt.words {
				wantCode(t, err, tt.code, w)
			}
			if f := stateFiles(t, n.dir); len(f) != 0 {
				t.Errorf("a failed ADD left records %v", f)
			}
			if got, _ := netnstest.Snapshot(t, n.host, "br9"); !reflect.DeepEqual(got, n.before) {
				t.Errorf("br9 = %+v, want %+v", got, n.before)
			}
			if got := filterCalls(n.w.calls, "MoveToNetns"); len(got) != 0 {
				t.Errorf("RDMA device moved: %v", n.w.calls)
			}
			if err := n.host.Do(func(ns.NetNS) error { return p.Del(args) }); err != nil {
				t.Errorf("DEL: %v", err)
			}
		})
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

// TestExclusiveNameCollisions checks that ADD and DEL succeed when host and
// pod both already have a netdev called like the other side's name.
func TestExclusiveNameCollisions(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	netnstest.AddVeth(t, n.host, netnstest.NewNS(t), "rdma0", 1500)
	pod := netnstest.NewNS(t)
	netnstest.AddVeth(t, pod, netnstest.NewNS(t), hostDev, 1500)
	if err := n.run(add, pod, podAll, prevResult100); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got, _ := netnstest.Snapshot(t, pod, "rdma0"); got.MAC != n.before.MAC {
		t.Errorf("pod rdma0 is not the RDMA netdev: %+v", got)
	}
	if err := n.run(del, pod, podAll, ""); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertHostRestored(t)
	if _, ok := netnstest.Snapshot(t, n.host, "rdma0"); !ok {
		t.Error("unrelated host rdma0 lost")
	}
}

const macvlan = `,"podSelection":"all","sharedLink":{"type":"macvlan"}`

func TestSharedMacvlanChildren(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeShared)
	pods := []ns.NetNS{netnstest.NewNS(t), netnstest.NewNS(t)}
	for _, pod := range pods {
		if err := n.run(add, pod, macvlan, prevResult100); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		child, ok := netnstest.Snapshot(t, pod, "rdma0")
		if !ok || child.Kind != "macvlan" || !child.Up || child.MAC == n.before.MAC {
			t.Errorf("pod rdma0 = %+v (present %v)", child, ok)
		}
		if err := n.run(check, pod, macvlan, n.w.stdout.String()); err != nil {
			t.Errorf("CHECK: %v", err)
		}
	}
	n.assertHostRestored(t) // the parent never leaves the host
	if err := n.run(gc, nil, macvlan+`,"cni.dev/valid-attachments":[{"containerID":"ctr-`+pods[0].Path()[len(pods[0].Path())-8:]+`","ifname":"eth0"}]`, ""); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, ok := netnstest.Snapshot(t, pods[1], "rdma0"); ok {
		t.Error("GC left the stale pod's child")
	}
	for i := 0; i < 2; i++ {
		if err := n.run(del, pods[0], macvlan, ""); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	for _, pod := range pods {
		if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
			t.Errorf("pod keeps %v", got)
		}
	}
	if f := stateFiles(t, n.dir); len(f) != 0 {
		t.Errorf("state left %v", f)
	}
	n.assertHostRestored(t)
}

// kernelHasIPVlan probes by creating an ipvlan in a throwaway netns.
func kernelHasIPVlan(t *testing.T) bool {
	t.Helper()
	probe := netnstest.NewNS(t)
	netnstest.AddVeth(t, probe, netnstest.NewNS(t), "parent0", 1500)
	err := probe.Do(func(ns.NetNS) error {
		parent, err := netlink.LinkByName("parent0")
		if err != nil {
			return err
		}
		return netlink.LinkAdd(&netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "probe0", ParentIndex: parent.Attrs().Index}})
	})
	return err == nil
}

// TestSharedIPVlan checks that the default shared link is ipvlan: where
// the kernel has it (the VM tier) the pod gets an ipvlan child; where it
// has none (this machine) ADD fails with code 104 and leaves nothing
// behind.
func TestSharedIPVlan(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeShared)
	pod := netnstest.NewNS(t)
	err := n.run(add, pod, podAll, prevResult100)
	if kernelHasIPVlan(t) {
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if child, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || child.Kind != "ipvlan" {
			t.Errorf("pod rdma0 = %+v", child)
		}
		if err := n.run(del, pod, podAll, ""); err != nil {
			t.Fatal(err)
		}
	} else {
		wantCode(t, err, CodeLinkSetup, "ipvlan")
	}
	if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
		t.Errorf("pod keeps %v", got)
	}
	if f := stateFiles(t, n.dir); len(f) != 0 {
		t.Errorf("state left %v", f)
	}
}

// fault fails the nth call of one kernel step: before it runs, or after it
// made its change (a step that fails half way).
type fault struct {
	step  string
	nth   int
	after bool
	seen  map[string]int
}

var errInjected = errors.New("injected")

func (f *fault) run(step string, do func() error) error {
	f.seen[step]++
	if step != f.step || f.seen[step] != f.nth {
		return do()
	}
	if f.after {
		if err := do(); err != nil {
			return err
		}
	}
	return errInjected
}

type faultyLinks struct {
	Links
	f *fault
}

func (l faultyLinks) Describe(host, pod string) (hl state.HostLink, err error) {
	err = l.f.run("Describe", func() error { hl, err = l.Links.Describe(host, pod); return err })
	return hl, err
}

func (l faultyLinks) MoveToPod(hl state.HostLink, podNS ns.NetNS) error {
	return l.f.run("MoveToPod", func() error { return l.Links.MoveToPod(hl, podNS) })
}

// AddChild failing after the child was made names it, as netdev.AddChild
// does for a child it created but could not read back.
func (l faultyLinks) AddChild(spec netdev.ChildSpec, podNS ns.NetNS) (c netdev.Child, err error) {
	err = l.f.run("AddChild", func() error { c, err = l.Links.AddChild(spec, podNS); return err })
	return c, err
}

type faultyIPAM struct {
	addr.IPAM
	f *fault
}

func (i faultyIPAM) Add(ctx context.Context, r addr.Request) (res *types100.Result, err error) {
	err = i.f.run("IPAMAdd", func() error { res, err = i.IPAM.Add(ctx, r); return err })
	return res, err
}

type faultyAddrs struct {
	Addressing
	f *fault
}

func (a faultyAddrs) Configure(podNS ns.NetNS, ifName string, res *types100.Result, opts addr.Options) error {
	return a.f.run("Configure", func() error { return a.Addressing.Configure(podNS, ifName, res, opts) })
}

// TestFailedAddLeavesNodeAsBefore checks that a failure at each step of ADD,
// before or after the step's own change, leaves the node as it was: the host
// netdev exactly restored (addresses, routes, MTU, state), the pod netns
// empty, the host-local lease released, no device-info file, pnet entry,
// hook listing or record. The kernel steps are real; RDMA and SMC stay
// behind the fake seam (this kernel has neither: their failures come from
// the world).
func TestFailedAddLeavesNodeAsBefore(t *testing.T) {
	testenv.Privileged(t)
	cases := []struct {
		mode  rdma.Mode
		step  string
		nth   int
		after bool
		code  uint
	}{
		{rdma.ModeExclusive, "Describe", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToPod", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToPod", 1, true, CodeLinkSetup},
		{rdma.ModeExclusive, "MoveToNetns", 1, false, CodeLinkSetup},
		{rdma.ModeExclusive, "IPAMAdd", 1, false, CodeIPAM},
		{rdma.ModeExclusive, "IPAMAdd", 1, true, CodeIPAM},
		{rdma.ModeExclusive, "Configure", 1, true, CodeLinkSetup},
		{rdma.ModeExclusive, "EnsurePnet", 1, false, CodeSMC},
		{rdma.ModeExclusive, "EnsurePnet", 2, false, CodeSMC},
		{rdma.ModeExclusive, "HookAdd", 1, false, CodeSMC},
		{rdma.ModeExclusive, "EnsureUEID", 1, false, CodeSMC},
		{rdma.ModeShared, "AddChild", 1, false, CodeLinkSetup},
		{rdma.ModeShared, "AddChild", 1, true, CodeLinkSetup},
		{rdma.ModeShared, "IPAMAdd", 1, true, CodeIPAM},
		{rdma.ModeShared, "Configure", 1, true, CodeLinkSetup},
		{rdma.ModeShared, "EnsurePnet", 2, false, CodeSMC},
		{rdma.ModeShared, "HookAdd", 1, false, CodeSMC},
	}
	for _, tc := range cases {
		when := "before"
		if tc.after {
			when = "after"
		}
		t.Run(fmt.Sprintf("%s/%s#%d/%s", tc.mode, tc.step, tc.nth, when), func(t *testing.T) {
			n := newNode(t, tc.mode)
			n.cniPath = filepath.Dir(testenv.RequireBinary(t, "host-local", testenv.ToolsDir("cni", "bin")))
			n.w.devices[0].PCI = "0000:3b:00.0"
			n.w.failOn = map[string]error{tc.step: errInjected}
			n.w.failNth = map[string]int{tc.step: tc.nth}
			f := &fault{step: tc.step, nth: tc.nth, after: tc.after, seen: map[string]int{}}
			n.wrap = func(p *Plugin) {
				p.env.Links = faultyLinks{p.env.Links, f}
				p.env.IPAM, p.env.Addrs = faultyIPAM{p.env.IPAM, f}, faultyAddrs{p.env.Addrs, f}
			}
			leases, devInfo := t.TempDir(), filepath.Join(n.dir, "devinfo", "net1.json")
			conf := `,"podSelection":"all","sharedLink":{"type":"macvlan"},` +
				`"ipam":{"type":"host-local","dataDir":"` + leases + `","ranges":[[{"subnet":"fd00:77::/64","rangeStart":"fd00:77::10"}]]},` +
				`"smcr":{"onUnsupported":"fail","transparent":"bpf","ueid":"RDMACHAIN"},` +
				`"runtimeConfig":{"CNIDeviceInfoFile":"` + devInfo + `",` +
				`"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}`
			pod := netnstest.NewNS(t)
			wantCode(t, n.run(add, pod, conf, prevResult100), tc.code, "injected")
			if f.seen[tc.step] < tc.nth && n.w.counts[tc.step] < tc.nth {
				t.Fatalf("step %s#%d never ran: %v", tc.step, tc.nth, n.w.calls)
			}
			n.assertHostRestored(t)
			if got := netnstest.Names(t, pod); !reflect.DeepEqual(got, []string{"lo"}) {
				t.Errorf("pod keeps %v", got)
			}
			if leaseCount(t, leases) != 0 {
				t.Error("lease kept")
			}
			assertFile(t, devInfo, "", "after the failed ADD")
			for netns, entries := range n.w.pnet {
				if len(entries) != 0 {
					t.Errorf("pnet entries left in netns %q: %v", netns, entries)
				}
			}
			if len(n.w.hooked) != 0 {
				t.Errorf("netns left in the socket hook: %v", n.w.hooked)
			}
			if files := stateFiles(t, n.dir); len(files) != 0 {
				t.Errorf("state left: %v", files)
			}
		})
	}
}
