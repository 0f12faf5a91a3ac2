package chain

import (
	"net"
	"reflect"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

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
