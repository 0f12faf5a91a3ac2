package podres

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rdma-chain/rdma-chain/internal/pbwire"
)

// fullPod sets every field kubelet may send, so the decoder skips what it
// does not read.
func fullPod(ns, name string) *prv1.PodResources {
	topo := &prv1.TopologyInfo{Nodes: []*prv1.NUMANode{{ID: 1}}}
	return &prv1.PodResources{Namespace: ns, Name: name, Containers: []*prv1.ContainerResources{
		{Name: "init", Devices: []*prv1.ContainerDevices{{ResourceName: "rdma/hca", DeviceIds: []string{"mlx5_1"}, Topology: topo}},
			CpuIds: []int64{0, 3, 7}, Memory: []*prv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 30, Topology: topo}}},
		{Name: "main", Devices: []*prv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-0"}},
			{ResourceName: "aliyun/erdma", DeviceIds: []string{"erdma_0", "erdma_1"}, Topology: topo}},
			DynamicResources: []*prv1.DynamicResource{{ClaimName: "c", ClaimNamespace: ns,
				ClaimResources: []*prv1.ClaimResource{{DriverName: "d", PoolName: "p", DeviceName: "x",
					CdiDevices: []*prv1.CDIDevice{{Name: "vendor/class=x"}}}}},
				{ClaimName: "nics", ClaimNamespace: ns, ClaimResources: []*prv1.ClaimResource{
					{DriverName: "rdma-chain.github.io", PoolName: "node1", DeviceName: "mlx5-0", ShareId: &shareID,
						CdiDevices: []*prv1.CDIDevice{{Name: "rdma-chain.github.io/rdma=a"}, {Name: "rdma-chain.github.io/rdma=b"}}},
					{DriverName: "dranet.gke.io", PoolName: "node1", DeviceName: "eth2"}}}}},
	}}
}

var shareID = "3f1e"

var fullPodClaims = func(ns string) []ClaimDevice {
	return []ClaimDevice{
		{ClaimNamespace: ns, ClaimName: "c", Driver: "d", Pool: "p", Device: "x", CDIDevices: []string{"vendor/class=x"}},
		{ClaimNamespace: ns, ClaimName: "nics", Driver: "rdma-chain.github.io", Pool: "node1", Device: "mlx5-0", ShareID: shareID,
			CDIDevices: []string{"rdma-chain.github.io/rdma=a", "rdma-chain.github.io/rdma=b"}},
		{ClaimNamespace: ns, ClaimName: "nics", Driver: "dranet.gke.io", Pool: "node1", Device: "eth2"},
	}
}

var fullPodDevices = []containerDevices{
	{resourceName: "rdma/hca", deviceIDs: []string{"mlx5_1"}},
	{resourceName: "nvidia.com/gpu", deviceIDs: []string{"GPU-0"}},
	{resourceName: "aliyun/erdma", deviceIDs: []string{"erdma_0", "erdma_1"}},
}

func TestEncodeGetRequestMatchesGeneratedTypes(t *testing.T) {
	for _, in := range [][2]string{{"default", "web"}, {probeNamespace, probeName}, {"", "x"}} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&prv1.GetPodResourcesRequest{PodNamespace: in[0], PodName: in[1]})
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeGetRequest(in[0], in[1]); !bytes.Equal(got, want) {
			t.Errorf("encodeGetRequest(%q, %q) = %x, want %x", in[0], in[1], got, want)
		}
	}
}

func TestDecodeMatchesGeneratedTypes(t *testing.T) {
	get, err := proto.Marshal(&prv1.GetPodResourcesResponse{PodResources: fullPod("default", "web")})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := decodeGetResponse(get)
	if err != nil {
		t.Fatal(err)
	}
	want := &podResources{namespace: "default", name: "web", containerDevs: fullPodDevices, claimDevs: fullPodClaims("default")}
	if !reflect.DeepEqual(pod, want) {
		t.Errorf("decodeGetResponse = %+v, want %+v", pod, want)
	}
	if pod, err := decodeGetResponse(nil); pod != nil || err != nil {
		t.Errorf("empty GetPodResourcesResponse = %+v, %v; want nil, nil", pod, err)
	}

	var pods []*prv1.PodResources
	for i := 0; i < 1000; i++ {
		pods = append(pods, fullPod("ns", "pod-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	pods = append(pods, fullPod("default", "web"), fullPod("default", "web2"))
	list, err := proto.Marshal(&prv1.ListPodResourcesResponse{PodResources: pods})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, name string
		want     *podResources
	}{
		{"default", "web", want},
		{"default", "ghost", nil},
		{"ns", "pod-none", nil},
		{"ns", "pod-zz", &podResources{namespace: "ns", name: "pod-zz", containerDevs: fullPodDevices, claimDevs: fullPodClaims("ns")}},
	} {
		got, err := findInList(list, tc.ns, tc.name)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("findInList(%s/%s) = %+v, %v; want %+v", tc.ns, tc.name, got, err, tc.want)
		}
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	good, _ := proto.Marshal(&prv1.GetPodResourcesResponse{PodResources: fullPod("default", "web")})
	for cut := 1; cut < len(good); cut += 7 {
		if _, err := decodeGetResponse(good[:cut]); err == nil {
			// A cut on a field boundary of the outer message is a valid
			// (shorter) message only at the end; inner cuts break a length.
			t.Errorf("decodeGetResponse of %d of %d bytes: no error", cut, len(good))
		}
		if _, err := findInList(good[:cut], "default", "web"); err == nil {
			t.Errorf("findInList of %d of %d bytes: no error", cut, len(good))
		}
	}
}

func FuzzDecodeReply(f *testing.F) {
	good, _ := proto.Marshal(&prv1.GetPodResourcesResponse{PodResources: fullPod("default", "web")})
	f.Add(good)
	for _, seed := range hostileClaimSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pod, err := decodeGetResponse(b)
		if err == nil {
			collect(pod, resources)
			served, foreign := collectClaims(pod, []string{"rdma-chain.github.io"})
			for _, d := range served {
				if d.Driver != "rdma-chain.github.io" {
					t.Fatalf("served claim device of driver %q", d.Driver)
				}
			}
			for _, d := range foreign {
				if d.Driver == "rdma-chain.github.io" {
					t.Fatalf("foreign claim device of the served driver: %+v", d)
				}
			}
		}
		if p, err := findInList(b, "default", "web"); err == nil && p != nil && (p.namespace != "default" || p.name != "web") {
			t.Fatalf("findInList returned %s/%s", p.namespace, p.name)
		}
	})
}

// BenchmarkFindInList measures finding a pod in one List reply of 1,000
// pods, the pod asked for in the middle.
func BenchmarkFindInList(b *testing.B) {
	var pods []*prv1.PodResources
	for i := 0; i < 1000; i++ {
		pods = append(pods, fullPod("default", fmt.Sprintf("pod-%d", i)))
	}
	list, err := proto.Marshal(&prv1.ListPodResourcesResponse{PodResources: pods})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(list)))
	for b.Loop() {
		if p, err := findInList(list, "default", "pod-500"); err != nil || p == nil {
			b.Fatal(p, err)
		}
	}
}

// hostileClaimSeeds returns replies whose dynamic_resources are malformed,
// nested past their length, of the wrong wire type, or huge in count.
func hostileClaimSeeds() [][]byte {
	str := func(num int, v string) []byte { return pbwire.AppendString(nil, num, v) }
	wrap := func(num int, parts ...[]byte) []byte {
		return pbwire.AppendString(nil, num, string(bytes.Join(parts, nil)))
	}
	claimRes := wrap(4, wrap(1, str(1, "x/y=z")), str(2, "rdma-chain.github.io"), str(3, "p"), str(4, "mlx5-0"), str(5, "s"))
	pod := func(container []byte) []byte {
		return wrap(1, str(1, "web"), str(2, "default"), wrap(3, str(1, "main"), container))
	}
	many := make([][]byte, 0, 2000)
	for range 2000 {
		many = append(many, claimRes)
	}
	return [][]byte{
		pod(wrap(5, str(2, "c"), str(3, "default"), claimRes)),
		pod(wrap(5, str(2, "c"), claimRes[:len(claimRes)-3])),                     // claim resource cut short
		pod(wrap(5, []byte{0x22, 0x05, 0x08, 0x01})),                              // claim_resources too short for its length
		pod(wrap(5, str(2, "c"), []byte{0x20, 0x07})),                             // claim_resources as a varint
		pod(wrap(5, wrap(4, []byte{0x0a, 0x02, 0x08, 0x01}, []byte{0x10, 0x01}))), // cdi_devices holds a varint; driver_name a varint
		pod(wrap(5, []byte{0x12, 0x7f}, bytes.Join(many, nil))),                   // claim_name's length runs into thousands of devices
		pod(wrap(5, bytes.Join(many, nil))),
	}
}
