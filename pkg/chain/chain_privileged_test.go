package chain

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"

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

// TestExclusiveDeviceHeld checks that, of two pods asking for one
// device, the second is told to try again.
func TestExclusiveDeviceHeld(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeExclusive)
	first, second := netnstest.NewNS(t), netnstest.NewNS(t)
	if err := n.run(add, first, podAll, prevResult100); err != nil {
		t.Fatal(err)
	}
	wantCode(t, n.run(add, second, podAll, prevResult100), 11, "rxe0")
	if err := n.run(del, first, podAll, ""); err != nil {
		t.Fatal(err)
	}
	if err := n.run(add, second, podAll, prevResult100); err != nil {
		t.Fatalf("ADD after release: %v", err)
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
