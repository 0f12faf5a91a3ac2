package dra

import (
	"context"
	"reflect"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// testSysfs builds a node with mlx5_0 on PCI 0000:3b:00.0 under pci0000:3a
// (NUMA 1), RoCE, ACTIVE, 4 GIDs, on bond0 of ens1f0/ens1f1; erdma_0
// without a parent on a virtio NIC under pci0000:00 (no NUMA); rxe0 (soft,
// no PCI).
func testSysfs(t *testing.T) *sysfs {
	s := newSysfs(t)
	s.pciFunction("pci0000:3a", "0000:3b:00.0", 1)
	s.symlink("../../../devices/pci0000:3a/0000:3b:00.0", "class/infiniband/mlx5_0/device")
	s.port("mlx5_0", "Ethernet", "4: ACTIVE", 4)
	s.write("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "bond0")
	s.write("class/net/bond0/address", "b8:59:9f:d4:6a:80")
	s.write("class/net/bond0/bonding/slaves", "ens1f1 ens1f0")
	s.pciFunction("pci0000:00", "0000:00:05.0", -1)
	s.mkdir("devices/pci0000:00/0000:00:05.0/virtio2")
	s.port("erdma_0", "Ethernet", "1: DOWN", 0)
	s.write("class/infiniband/erdma_0/ports/1/gid_attrs/ndevs/0", "eth1")
	s.write("class/net/eth1/address", "00:16:3e:01:02:03")
	s.symlink("../../../devices/pci0000:00/0000:00:05.0/virtio2", "class/net/eth1/device")
	s.port("rxe0", "Ethernet", "4: ACTIVE", 1024)
	s.write("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "eth0")
	s.write("class/net/eth0/address", "52:54:00:12:34:56")
	return s
}

func discover(t *testing.T, s *sysfs, mode string, recs []*state.Record, names ...string) (*Discoverer, *Node) {
	t.Helper()
	d := &Discoverer{System: &rdma.System{SysRoot: s.root, NL: sysfsOnlyNL{mode: mode}}, SysRoot: s.root,
		Records: func() ([]*state.Record, error) { return recs, nil }}
	n, err := d.Discover()
	if err != nil {
		t.Fatal(err)
	}
	return d, n
}

func attrStr(d resourceapi.Device, k resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[k]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func TestDevicesShared(t *testing.T) {
	_, node := discover(t, testSysfs(t), "shared", nil)
	devs := Devices(node)
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"erdma-0", "mlx5-0", "rxe0"}) {
		t.Fatalf("devices %v", names)
	}
	mlx, erdma, rxe := devs[1], devs[0], devs[2]
	for k, want := range map[resourceapi.QualifiedName]string{
		AttrRDMADevice: "mlx5_0", AttrNetdev: "bond0", AttrLinkLayer: "Ethernet", AttrPortState: "ACTIVE",
		AttrNetnsMode: "shared", AttrBondMembers: "ens1f0,ens1f1",
		"resource.kubernetes.io/pcieRoot": "pci0000:3a", "resource.kubernetes.io/pciBusID": "0000:3b:00.0",
	} {
		if got := attrStr(mlx, k); got != want {
			t.Errorf("mlx5-0 %s = %q, want %q", k, got, want)
		}
	}
	if a := mlx.Attributes["resource.kubernetes.io/numaNode"]; a.IntValue == nil || *a.IntValue != 1 {
		t.Errorf("mlx5-0 numaNode = %+v, want 1", a)
	}
	if a := mlx.Attributes[AttrBond]; a.BoolValue == nil || !*a.BoolValue {
		t.Errorf("mlx5-0 bond = %+v", a)
	}
	if a := mlx.Attributes[AttrGIDTableSize]; a.IntValue == nil || *a.IntValue != 4 {
		t.Errorf("mlx5-0 gidTableSize = %+v", a)
	}
	if mlx.AllowMultipleAllocations == nil || !*mlx.AllowMultipleAllocations {
		t.Error("a shared-mode NIC must allow multiple allocations")
	}
	c := mlx.Capacity[CapGIDs]
	if c.Value.Cmp(resource.MustParse("4")) != 0 || c.RequestPolicy == nil || c.RequestPolicy.Default.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("mlx5-0 gids capacity = %+v", c)
	}
	// eRDMA-like: PCI through the virtio NIC, no NUMA node published.
	if attrStr(erdma, "resource.kubernetes.io/pcieRoot") != "pci0000:00" || attrStr(erdma, "resource.kubernetes.io/pciBusID") != "0000:00:05.0" {
		t.Errorf("erdma-0 PCI attributes %+v", erdma.Attributes)
	}
	if _, ok := erdma.Attributes["resource.kubernetes.io/numaNode"]; ok {
		t.Error("a device without NUMA affinity must not publish numaNode")
	}
	if erdma.Capacity != nil || erdma.AllowMultipleAllocations != nil {
		t.Error("a port without a GID table has no shared capacity")
	}
	if attrStr(rxe, "resource.kubernetes.io/pcieRoot") != "" || attrStr(rxe, AttrKernelDriver) != "rdma_rxe" {
		t.Errorf("rxe0 attributes %+v", rxe.Attributes)
	}
}

// TestDevicesExclusiveHeld checks that in exclusive mode a NIC is
// allocated whole; a device a pod holds is gone from the host's view and
// stays published, from the last discovery or, after a restart, from the
// plugin's record.
func TestDevicesExclusiveHeld(t *testing.T) {
	s := testSysfs(t)
	d, node := discover(t, s, "exclusive", nil)
	for _, dev := range Devices(node) {
		if dev.AllowMultipleAllocations != nil || dev.Capacity != nil {
			t.Errorf("exclusive-mode %s has shared capacity", dev.Name)
		}
	}
	rec := &state.Record{Mode: rdma.ModeExclusive, Links: []state.Link{{Device: "mlx5_0", RDMAMoved: true, HostLink: state.HostLink{HostName: "eth7"}}}}
	d.Records = func() ([]*state.Record, error) { return []*state.Record{rec}, nil }
	if err := removeAll(s.root + "/class/infiniband/mlx5_0"); err != nil {
		t.Fatal(err)
	}
	node, err := d.Discover()
	if err != nil {
		t.Fatal(err)
	}
	held := find(t, Devices(node), "mlx5-0")
	if a := held.Attributes[AttrInPod]; a.BoolValue == nil || !*a.BoolValue || attrStr(held, "resource.kubernetes.io/pcieRoot") != "pci0000:3a" {
		t.Errorf("held device from the last discovery: %+v", held.Attributes)
	}
	restarted := &Discoverer{System: d.System, SysRoot: s.root, Records: d.Records}
	node, err = restarted.Discover()
	if err != nil {
		t.Fatal(err)
	}
	held = find(t, Devices(node), "mlx5-0")
	if attrStr(held, AttrRDMADevice) != "mlx5_0" || attrStr(held, AttrNetdev) != "eth7" {
		t.Errorf("held device after a restart: %+v", held.Attributes)
	}
	rec.Mode = rdma.ModeShared
	node, _ = restarted.Discover()
	for _, dev := range Devices(node) {
		if dev.Name == "mlx5-0" {
			t.Error("a device no exclusive-mode record holds is not published when gone")
		}
	}
}

// TestDevicesNameCollision checks that two devices whose DRA names
// collide are published by neither.
func TestDevicesNameCollision(t *testing.T) {
	s := testSysfs(t)
	s.port("mlx5-0", "Ethernet", "4: ACTIVE", 4)
	_, node := discover(t, s, "shared", nil)
	for _, dev := range Devices(node) {
		if dev.Name == "mlx5-0" {
			t.Errorf("colliding name published: %+v", dev)
		}
	}
	if len(node.Skipped) != 2 {
		t.Errorf("skipped %v, want both", node.Skipped)
	}
}

// TestPublishedSlice checks that the devices make one valid ResourceSlice
// for the node's pool through the real slice controller (against the API's
// fake clientset: logic only).
func TestPublishedSlice(t *testing.T) {
	_, node := discover(t, testSysfs(t), "shared", nil)
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := resourceslice.StartController(ctx, resourceslice.Options{DriverName: DriverName, KubeClient: client,
		Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: "node1", UID: "u1"},
		Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node1": {
			Slices: []resourceslice.Slice{{Devices: Devices(node)}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var slices *resourceapi.ResourceSliceList
	deadline := time.Now().Add(30 * time.Second)
	for {
		slices, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err == nil && len(slices.Items) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || len(slices.Items) != 1 {
		t.Fatalf("slices %v, %v; want one", slices, err)
	}
	sl := slices.Items[0].Spec
	if sl.Driver != DriverName || sl.Pool.Name != "node1" || sl.NodeName == nil || *sl.NodeName != "node1" || len(sl.Devices) != 3 {
		t.Errorf("slice spec %+v", sl)
	}
}
