package chain

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

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
