package dra

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func testDriver(t *testing.T) (*Driver, *sysfs) {
	s := testSysfs(t)
	s.charDev("infiniband_verbs", "uverbs0", "mlx5_0")
	s.charDev("infiniband_verbs", "uverbs1", "rxe0")
	s.charDev("infiniband_mad", "umad0", "mlx5_0")
	s.charDev("infiniband_mad", "issm0", "mlx5_0")
	s.mkdir("class/misc/rdma_cm")
	_, node := discover(t, s, "shared", nil)
	d := &Driver{NodeName: "node1", SysRoot: s.root, CDIDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.SetNode(node)
	return d, s
}

func claim(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}}}
}

func result(req, pool, dev string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: req, Driver: DriverName, Pool: pool, Device: dev}
}

// TestPrepareUnprepare checks that Prepare writes one CDI spec per claim
// with exactly the allocated device's character devices; another
// driver's or another pool's results are not this node's; kubelet asking
// again (or a restarted driver, with the device gone from the host in
// exclusive mode) gets the same answer from the spec on disk; Unprepare
// removes it, twice without error.
func TestPrepareUnprepare(t *testing.T) {
	d, _ := testDriver(t)
	share := types.UID("0c9f")
	shared := result("rdma", "node1", "mlx5-0")
	shared.ShareID = &share
	other := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "node1", Device: "gpu-0"}
	c := claim("u1", shared, other, result("rdma", "node2", "mlx5-0"))
	ctx := context.Background()
	got, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || got["u1"].Err != nil {
		t.Fatalf("prepare: %v %+v", err, got)
	}
	want := []kubeletplugin.Device{{Requests: []string{"rdma"}, PoolName: "node1", DeviceName: "mlx5-0",
		CDIDeviceIDs: []string{"rdma-chain.github.io/rdma=u1-mlx5-0"}, ShareID: &share}}
	if !reflect.DeepEqual(got["u1"].Devices, want) {
		t.Errorf("devices %+v, want %+v", got["u1"].Devices, want)
	}
	b, spec := writtenSpec(t, d, "u1")
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if spec.Kind != CDIKind || len(spec.Devices) != 1 || spec.Devices[0].Name != "u1-mlx5-0" ||
		!reflect.DeepEqual(nodes, []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm"}) {
		t.Errorf("CDI spec %s", b)
	}

	restarted := &Driver{NodeName: "node1", SysRoot: d.SysRoot, CDIDir: d.CDIDir, Log: d.Log}
	restarted.SetNode(&Node{}) // the device is in a pod now: not on the host
	again, err := restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || again["u1"].Err != nil || !reflect.DeepEqual(again["u1"].Devices, want) {
		t.Errorf("prepare again after a restart: %v %+v", err, again)
	}
	b2, _ := os.ReadFile(d.specs().path("u1"))
	if string(b2) != string(b) {
		t.Error("preparing again rewrote the spec")
	}
	for range 2 {
		res, err := restarted.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "u1"}})
		if err != nil || res["u1"] != nil {
			t.Fatalf("unprepare: %v %+v", err, res)
		}
	}
	if _, err := os.Stat(d.specs().path("u1")); !os.IsNotExist(err) {
		t.Errorf("spec left after unprepare: %v", err)
	}
}

func TestPrepareRefuses(t *testing.T) {
	d, _ := testDriver(t)
	unallocated := claim("u3")
	unallocated.Status.Allocation = nil
	cases := map[string]*resourceapi.ResourceClaim{
		"unknown device":      claim("u2", result("rdma", "node1", "mlx5-9")),
		"not allocated":       unallocated,
		"no char devices":     claim("u4", result("rdma", "node1", "erdma-0")),
		"one bad of two devs": claim("u5", result("a", "node1", "rxe0"), result("b", "node1", "nope")),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			if err != nil || got[c.UID].Err == nil {
				t.Fatalf("prepare = %v %+v; want a per-claim error", err, got)
			}
			if _, err := os.Stat(d.specs().path(string(c.UID))); !os.IsNotExist(err) {
				t.Error("a refused claim got a CDI spec")
			}
		})
	}
}

// TestPrepareSoftRoCE checks that a claim allocated a soft-RoCE NIC is
// prepared with rdma_cm when the node has it and no uverbs (the pod's own
// device comes at its ADD), always with the NIC in the environment so that
// the CDI device has an edit; asked again, the same from disk; unprepared
// twice without error.
func TestPrepareSoftRoCE(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rdmaCM bool
		nodes  []string
	}{
		{"rdma_cm", true, []string{"/dev/infiniband/rdma_cm"}},
		{"no rdma_cm", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := softRoCESysfs(t, "up")
			s.charDev("infiniband_verbs", "uverbs0", "mlx5_0")
			s.charDev("infiniband_verbs", "uverbs1", "rxe_00000000000b") // another pod's
			if tc.rdmaCM {
				s.mkdir("class/misc/rdma_cm")
			}
			node, err := softRoCEDiscoverer(s, "shared", Offer{SoftRoCE: map[string]bool{"eth2": true}}, "").Discover()
			if err != nil {
				t.Fatal(err)
			}
			d := &Driver{NodeName: "node1", SysRoot: s.root, CDIDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)}
			d.SetNode(node)
			share := types.UID("5e1f")
			r := result("rdma", "node1", "softroce-eth2")
			r.ShareID = &share
			c := claim("u1", r)
			want := []kubeletplugin.Device{{Requests: []string{"rdma"}, PoolName: "node1", DeviceName: "softroce-eth2",
				CDIDeviceIDs: []string{"rdma-chain.github.io/rdma=u1-softroce-eth2"}, ShareID: &share}}
			var first []byte
			for i := range 2 {
				got, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
				if err != nil || got["u1"].Err != nil || !reflect.DeepEqual(got["u1"].Devices, want) {
					t.Fatalf("prepare %d: %v %+v, want %+v", i, err, got, want)
				}
				b, err := os.ReadFile(d.specs().path("u1"))
				if err != nil {
					t.Fatal(err)
				}
				if i == 1 && string(b) != string(first) {
					t.Errorf("preparing again rewrote the spec")
				}
				first = b
				d.SetNode(&Node{}) // asked again after a restart, the NIC not read yet
			}
			checkSoftRoCESpec(t, first, tc.nodes)
			for range 2 {
				res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "u1"}})
				if err != nil || res["u1"] != nil {
					t.Fatalf("unprepare: %v %+v", err, res)
				}
			}
		})
	}
}

// checkSoftRoCESpec checks that spec b holds the soft-RoCE CDI device with
// exactly nodes and the NIC in its environment.
func checkSoftRoCESpec(t *testing.T, b []byte, nodes []string) {
	t.Helper()
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 1 || spec.Devices[0].Name != "u1-softroce-eth2" {
		t.Fatalf("CDI spec %s", b)
	}
	edits := spec.Devices[0].ContainerEdits
	var got []string
	for _, n := range edits.DeviceNodes {
		got = append(got, n.Path)
	}
	if !reflect.DeepEqual(got, nodes) || !reflect.DeepEqual(edits.Env, []string{"RDMA_CHAIN_SOFTROCE_HOST_NIC=eth2"}) {
		t.Errorf("device nodes %v env %v, want %v and the NIC", got, edits.Env, nodes)
	}
}
