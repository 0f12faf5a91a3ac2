package podres

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
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
					CdiDevices: []*prv1.CDIDevice{{Name: "vendor/class=x"}}}}}}},
	}}
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
	want := &podResources{namespace: "default", name: "web", containerDevs: fullPodDevices}
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
		{"ns", "pod-zz", &podResources{namespace: "ns", name: "pod-zz", containerDevs: fullPodDevices}},
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
	f.Fuzz(func(t *testing.T, b []byte) {
		pod, err := decodeGetResponse(b)
		if err == nil {
			collect(pod, resources)
		}
		if p, err := findInList(b, "default", "web"); err == nil && p != nil && (p.namespace != "default" || p.name != "web") {
			t.Fatalf("findInList returned %s/%s", p.namespace, p.name)
		}
	})
}

// BenchmarkFindInList: one List reply of 1,000 pods, the pod asked for in
// the middle.
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
