package dra

import (
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// softRoCESysfs is testSysfs with eth2, a NIC without an RDMA device on
// PCI 0000:3b:00.1 under pci0000:3a (NUMA 1) in operstate state.
func softRoCESysfs(t *testing.T, state string) *sysfs {
	s := testSysfs(t)
	s.pciFunction("pci0000:3a", "0000:3b:00.1", 1)
	s.symlink("../../../devices/pci0000:3a/0000:3b:00.1", "class/net/eth2/device")
	s.write("class/net/eth2/address", "b8:59:9f:d4:6a:81")
	s.write("class/net/eth2/operstate", state)
	return s
}

// softRoCEDiscoverer reads s in mode with offer, on a kernel that serves
// per-pod rxe devices unless unsupported says why not.
func softRoCEDiscoverer(s *sysfs, mode string, offer Offer, unsupported string, recs ...*state.Record) *Discoverer {
	return &Discoverer{System: &rdma.System{SysRoot: s.root, NL: sysfsOnlyNL{mode: mode}}, SysRoot: s.root,
		Offer: func() Offer { return offer }, SoftRoCEUnsupported: func() string { return unsupported }, SoftRoCEPods: 8,
		Records: func() ([]*state.Record, error) { return recs, nil }}
}

func attrBool(d resourceapi.Device, k resourceapi.QualifiedName) (value, ok bool) {
	if a, found := d.Attributes[k]; found && a.BoolValue != nil {
		return *a.BoolValue, true
	}
	return false, false
}

// TestDiscoverSoftRoCE checks that a podSoftRoCE entry's NIC is published
// as one device with its attributes and its capacity pods, beside the
// other entries' devices (softRoCE false on each), and that its operstate
// is its port's state, a taint when it is down.
func TestDiscoverSoftRoCE(t *testing.T) {
	for _, tc := range []struct {
		name      string
		offer     Offer
		operstate string
		want      []string
		portState string
	}{
		{"alone", Offer{SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "up", []string{"softroce-eth2"}, "ACTIVE"},
		{"beside an entry without a list", Offer{All: true, SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "up",
			[]string{"softroce-eth2", "erdma-0", "mlx5-0", "rxe0"}, "ACTIVE"},
		{"beside a devices list", Offer{Names: map[string]bool{"mlx5_0": true}, SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "up",
			[]string{"softroce-eth2", "mlx5-0"}, "ACTIVE"},
		{"operstate unknown", Offer{SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "unknown", []string{"softroce-eth2"}, "ACTIVE"},
		{"down", Offer{SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "down", []string{"softroce-eth2"}, "DOWN"},
		{"lower layer down", Offer{SoftRoCE: map[string]bool{"eth2": true}, From: "x"}, "lowerlayerdown", []string{"softroce-eth2"}, "DOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := softRoCEDiscoverer(softRoCESysfs(t, tc.operstate), "shared", tc.offer, "").Discover()
			if err != nil {
				t.Fatal(err)
			}
			devs := Devices(node)
			if got := publishedNames(node); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("published %v, want %v (skipped %v)", got, tc.want, node.Skipped)
			}
			d := devs[0]
			for k, want := range map[resourceapi.QualifiedName]string{
				AttrNetdev: "eth2", AttrKernelDriver: "rdma_rxe", AttrLinkLayer: "Ethernet", AttrNetnsMode: "shared", AttrPortState: tc.portState,
				"resource.kubernetes.io/pciBusID": "0000:3b:00.1", "resource.kubernetes.io/pcieRoot": "pci0000:3a",
				AttrRDMADevice: "", AttrBondMembers: "",
			} {
				if got := attrStr(d, k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			for k, want := range map[resourceapi.QualifiedName]bool{AttrSoftRoCE: true, AttrSMCR: false, AttrBond: false, AttrInPod: false} {
				if got, ok := attrBool(d, k); !ok || got != want {
					t.Errorf("%s = %v (set %v), want %v", k, got, ok, want)
				}
			}
			if a := d.Attributes["resource.kubernetes.io/numaNode"]; a.IntValue == nil || *a.IntValue != 1 {
				t.Errorf("numaNode = %+v, want 1", a)
			}
			if _, ok := d.Attributes[AttrGIDTableSize]; ok {
				t.Error("a soft-RoCE NIC has no GID table of its own")
			}
			checkPodsCapacity(t, d, 8)
			if down := tc.portState != "ACTIVE"; down != (len(d.Taints) == 1 && d.Taints[0].Key == TaintPortDown && d.Taints[0].Value == "DOWN") {
				t.Errorf("taints %+v with port %s", d.Taints, tc.portState)
			}
			for _, other := range devs[1:] {
				if _, pods := other.Capacity[CapPods]; pods {
					t.Errorf("%s has capacity pods", other.Name)
				}
				if soft, ok := attrBool(other, AttrSoftRoCE); !ok || soft {
					t.Errorf("%s: softRoCE %v (set %v), want false", other.Name, soft, ok)
				}
			}
		})
	}
}

// checkPodsCapacity checks that d may be allocated many times, up to pods
// claims of 1 each by default, and has no other capacity.
func checkPodsCapacity(t *testing.T, d resourceapi.Device, pods int64) {
	t.Helper()
	c, ok := d.Capacity[CapPods]
	one := resource.MustParse("1")
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || !ok || len(d.Capacity) != 1 ||
		c.Value.Cmp(*resource.NewQuantity(pods, resource.DecimalSI)) != 0 || c.RequestPolicy == nil || c.RequestPolicy.Default.Cmp(one) != 0 ||
		c.RequestPolicy.ValidRange == nil || c.RequestPolicy.ValidRange.Min.Cmp(one) != 0 || c.RequestPolicy.ValidRange.Step.Cmp(one) != 0 {
		t.Errorf("multiple %v, capacity %+v, want pods %d of 1 each", d.AllowMultipleAllocations, d.Capacity, pods)
	}
}

// TestDiscoverSoftRoCEPodsDefault checks that a Discoverer given no
// capacity publishes DefaultSoftRoCEPods.
func TestDiscoverSoftRoCEPodsDefault(t *testing.T) {
	d := softRoCEDiscoverer(softRoCESysfs(t, "up"), "shared", Offer{SoftRoCE: map[string]bool{"eth2": true}}, "")
	d.SoftRoCEPods = 0
	node, err := d.Discover()
	if err != nil {
		t.Fatal(err)
	}
	checkPodsCapacity(t, find(t, Devices(node), "softroce-eth2"), DefaultSoftRoCEPods)
}

// TestDiscoverSoftRoCERefused checks that a soft-RoCE NIC the plugin
// would refuse (its error 112) is not published and says why.
func TestDiscoverSoftRoCERefused(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mode        string
		netdev      string
		unsupported string
		setup       func(s *sysfs)
		key, why    string
	}{
		{name: "exclusive mode", mode: "exclusive", netdev: "eth2", key: "softroce-eth2", why: "exclusive netns mode"},
		{name: "kernel without per-netns rxe", mode: "shared", netdev: "eth2", unsupported: "kernel 6.12.41: rdma_rxe works inside a netns only from Linux 7.1",
			key: "softroce-eth2", why: "podSoftRoCE on netdev eth2: kernel 6.12.41: rdma_rxe works inside a netns only from Linux 7.1"},
		{name: "the NIC has an RDMA device", mode: "shared", netdev: "eth1", key: "softroce-eth1", why: "it has RDMA device erdma_0"},
		{name: "no such netdev", mode: "shared", netdev: "eth9", key: "softroce-eth9", why: "no such netdev in the host netns"},
		{name: "an RDMA device of the same name", mode: "shared", netdev: "eth2", setup: func(s *sysfs) { s.port("softroce-eth2", "Ethernet", "4: ACTIVE", 4) },
			key: "softroce-eth2", why: "shared by the soft-RoCE NIC eth2 and an RDMA device"},
		{name: "an RDMA device of the same DRA name", mode: "shared", netdev: "eth2", setup: func(s *sysfs) { s.port("softroce_eth2", "Ethernet", "4: ACTIVE", 4) },
			key: "softroce-eth2", why: "DRA device name softroce-eth2 is shared by 2 devices"},
		{name: "no DRA name", mode: "shared", netdev: "_", setup: func(s *sysfs) { s.write("class/net/_/operstate", "up") },
			key: "_", why: "no DRA device name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := softRoCESysfs(t, "up")
			if tc.setup != nil {
				tc.setup(s)
			}
			node, err := softRoCEDiscoverer(s, tc.mode, Offer{All: true, SoftRoCE: map[string]bool{tc.netdev: true}}, tc.unsupported).Discover()
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range publishedNames(node) {
				if strings.HasPrefix(name, "softroce") {
					t.Errorf("published %s", name)
				}
			}
			if why := node.Skipped[tc.key]; !strings.Contains(why, tc.why) {
				t.Errorf("skipped[%s] = %q, want %q (skipped %v)", tc.key, why, tc.why, node.Skipped)
			}
		})
	}
}

// TestDiscoverWithoutPodSoftRoCE checks that the pods' own rxe devices,
// which the host lists in shared mode, are never published, even to an
// entry that offers every device: a device a record names as a pod's
// soft-RoCE device, and one of rdma.SoftRoCEName's shape whose netdev is
// not in the host netns. A device of that shape on a host netdev is an
// admin's and is published, as is one a record no longer names as its
// soft-RoCE device.
func TestDiscoverWithoutPodSoftRoCE(t *testing.T) {
	const (
		recorded = "rxe_00000000000a" // on eth2, a host netdev: only its record tells
		shaped   = "rxe_00000000000b" // on a pod's netdev, no record of this dataDir
		admins   = "rxe_00000000000c" // on eth2, no record
		released = "rxe7"             // a record that gave its device back
	)
	s := softRoCESysfs(t, "up")
	s.port(recorded, "Ethernet", "4: ACTIVE", 2)
	s.write("class/infiniband/"+recorded+"/ports/1/gid_attrs/ndevs/0", "eth2")
	s.port(shaped, "Ethernet", "4: ACTIVE", 2)
	s.write("class/infiniband/"+shaped+"/ports/1/gid_attrs/ndevs/0", "rdma0") // in the pod's netns
	s.port(admins, "Ethernet", "4: ACTIVE", 2)
	s.write("class/infiniband/"+admins+"/ports/1/gid_attrs/ndevs/0", "eth2")
	s.port(released, "Ethernet", "4: ACTIVE", 2)
	rec := &state.Record{Mode: rdma.ModeShared, Pod: state.Pod{Namespace: "team", Name: "p1"}, Links: []state.Link{
		{Device: recorded, SoftRoCE: true, HostLink: state.HostLink{HostName: "eth2", PodName: "rdma0"}},
		{Device: released, HostLink: state.HostLink{HostName: "eth2", PodName: "rdma1"}},
	}}
	node, err := softRoCEDiscoverer(s, "shared", Offer{All: true}, "", rec).Discover()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"erdma-0", "mlx5-0", "rxe0", "rxe7", "rxe-00000000000c"} // by RDMA device name
	if got := publishedNames(node); !reflect.DeepEqual(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	for name, why := range map[string]string{
		recorded: "the soft-RoCE device of pod team/p1 (its attachment record)",
		shaped:   "named as a pod's soft-RoCE device (rxe_ and 12 hex digits) on a netdev outside the host netns",
	} {
		if !strings.Contains(node.Skipped[name], why) {
			t.Errorf("skipped[%s] = %q, want %q", name, node.Skipped[name], why)
		}
	}
	if len(node.Skipped) != 2 {
		t.Errorf("skipped %v, want the two pods' devices", node.Skipped)
	}
}
