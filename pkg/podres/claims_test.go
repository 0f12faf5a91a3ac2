package podres

import (
	"context"
	"reflect"
	"testing"

	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// claimPod returns a pod with a device-plugin allocation and claims: one
// of the served driver shared by two containers (kubelet reports it per
// container), one share of a device with consumable capacity, one of
// another driver (dranet) in the same claim.
func claimPod() *prv1.PodResources {
	share := "7a2c"
	served := &prv1.DynamicResource{ClaimName: "rdma", ClaimNamespace: "default", ClaimResources: []*prv1.ClaimResource{
		{DriverName: "rdma-chain.github.io", PoolName: "node1", DeviceName: "mlx5-0",
			CdiDevices: []*prv1.CDIDevice{{Name: "rdma-chain.github.io/rdma=default-rdma-mlx5-0"}}},
	}}
	mixed := &prv1.DynamicResource{ClaimName: "mixed", ClaimNamespace: "default", ClaimResources: []*prv1.ClaimResource{
		{DriverName: "rdma-chain.github.io", PoolName: "node1", DeviceName: "eth1", ShareId: &share},
		{DriverName: "dranet.gke.io", PoolName: "node1", DeviceName: "eth2"},
	}}
	return &prv1.PodResources{Namespace: "default", Name: "dra", Containers: []*prv1.ContainerResources{
		{Name: "a", Devices: []*prv1.ContainerDevices{{ResourceName: "rdma/hca", DeviceIds: []string{"7"}}},
			DynamicResources: []*prv1.DynamicResource{served}},
		{Name: "b", DynamicResources: []*prv1.DynamicResource{served, mixed}},
	}}
}

func TestLookupClaims(t *testing.T) {
	want := &Pod{
		Known:   true,
		Devices: []Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"7"}}},
		Claims: []ClaimDevice{
			{ClaimNamespace: "default", ClaimName: "rdma", Driver: "rdma-chain.github.io", Pool: "node1", Device: "mlx5-0",
				CDIDevices: []string{"rdma-chain.github.io/rdma=default-rdma-mlx5-0"}},
			{ClaimNamespace: "default", ClaimName: "mixed", Driver: "rdma-chain.github.io", Pool: "node1", Device: "eth1", ShareID: "7a2c"},
		},
		Foreign: []ClaimDevice{{ClaimNamespace: "default", ClaimName: "mixed", Driver: "dranet.gke.io", Pool: "node1", Device: "eth2"}},
	}
	noDriver := &Pod{Known: true, Devices: want.Devices, Foreign: append(append([]ClaimDevice{}, want.Claims[0], want.Claims[1]), want.Foreign...)}
	tests := []struct {
		name string
		get  getMode
		q    Query
		want *Pod
	}{
		{"get", getOK, Query{ResourceNames: []string{"rdma/hca"}, Drivers: []string{"rdma-chain.github.io"}}, want},
		{"list", getGateOff, Query{ResourceNames: []string{"rdma/hca"}, Drivers: []string{"rdma-chain.github.io"}}, want},
		{"driver not served: all foreign", getOK, Query{ResourceNames: []string{"rdma/hca"}}, noDriver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeKubelet{pods: []*prv1.PodResources{claimPod()}, get: tt.get}
			got, err := New(serve(t, f), 0).Lookup(context.Background(), "default", "dra", tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lookup =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
	f := &fakeKubelet{pods: []*prv1.PodResources{claimPod()}}
	got, err := New(serve(t, f), 0).Lookup(context.Background(), "default", "ghost", Query{Drivers: []string{"rdma-chain.github.io"}})
	if err != nil || got.Known || len(got.Devices) != 0 || got.Claims != nil || got.Foreign != nil {
		t.Errorf("Lookup of an unknown pod = %+v, %v; want an empty Pod", got, err)
	}
}
