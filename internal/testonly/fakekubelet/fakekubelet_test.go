package fakekubelet

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/podres"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestServesPodResources checks that the fake answers the project's
// client over kubelet's API, with Get and, with Get disabled, through
// List.
func TestServesPodResources(t *testing.T) {
	pods := []Pod{
		{Namespace: "default", Name: "web", Resources: map[string][]string{"rdma/hca": {"mlx5_0"}, "example.com/gpu": {"0"}}},
		{Namespace: "other", Name: "web", Resources: map[string][]string{"rdma/hca": {"mlx5_1"}}},
	}
	tests := []struct {
		name string
		opts Options
		pod  string
		want []podres.Allocation
	}{
		{"get", Options{}, "web", []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}}},
		{"get unknown pod", Options{}, "ghost", []podres.Allocation{}},
		{"list", Options{GetDisabled: true}, "web", []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}}},
		{"list unknown pod", Options{GetDisabled: true}, "ghost", []podres.Allocation{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(testenv.SocketDir(t), "kubelet.sock")
			s, err := StartWith(sock, pods, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Stop)
			c := podres.New(sock, 0)
			got, err := c.Allocated(context.Background(), "default", tt.pod, []string{"rdma/hca"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if err := c.Probe(context.Background()); err != nil {
				t.Errorf("Probe = %v", err)
			}
		})
	}
}

// TestServesClaims checks that the fake reports claims in
// dynamic_resources as kubelet does: the client's Lookup splits them by
// driver.
func TestServesClaims(t *testing.T) {
	pods := []Pod{{Namespace: "default", Name: "dra", Resources: map[string][]string{"rdma/hca": {"3"}}, Claims: []Claim{
		{Namespace: "default", Name: "nic", Driver: "rdma-chain.github.io", Pool: "node1", Device: "simrdma0", ShareID: "s1", CDI: []string{"rdma-chain.github.io/rdma=x"}},
		{Namespace: "default", Name: "nic2", Driver: "dranet.gke.io", Pool: "node1", Device: "eth2"},
	}}}
	sock := filepath.Join(testenv.SocketDir(t), "kubelet.sock")
	s, err := Start(sock, pods)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	got, err := podres.New(sock, 0).Lookup(context.Background(), "default", "dra", podres.Query{ResourceNames: []string{"rdma/hca"}, Drivers: []string{"rdma-chain.github.io"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &podres.Pod{
		Known:   true,
		Devices: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"3"}}},
		Claims: []podres.ClaimDevice{{ClaimNamespace: "default", ClaimName: "nic", Driver: "rdma-chain.github.io", Pool: "node1",
			Device: "simrdma0", ShareID: "s1", CDIDevices: []string{"rdma-chain.github.io/rdma=x"}}},
		Foreign: []podres.ClaimDevice{{ClaimNamespace: "default", ClaimName: "nic2", Driver: "dranet.gke.io", Pool: "node1", Device: "eth2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Lookup =\n%+v\nwant\n%+v", got, want)
	}
}
