package chain

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

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
