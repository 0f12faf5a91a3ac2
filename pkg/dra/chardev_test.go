package dra

import (
	"reflect"
	"testing"
)

// TestCharDevices checks that a device's character devices are its own
// uverbs, its umad/issm pairs and rdma_cm; another device's never (a
// name that is a prefix of the other's included).
func TestCharDevices(t *testing.T) {
	s := newSysfs(t)
	s.charDev("infiniband_verbs", "uverbs0", "mlx5_0")
	s.charDev("infiniband_verbs", "uverbs1", "mlx5_1")
	s.charDev("infiniband_verbs", "uverbs10", "mlx5_10")
	s.charDev("infiniband_mad", "umad0", "mlx5_0")
	s.charDev("infiniband_mad", "issm0", "mlx5_0")
	s.charDev("infiniband_mad", "umad1", "mlx5_1")
	s.charDev("infiniband_mad", "issm1", "mlx5_1")
	s.charDev("infiniband_mad", "umad2", "mlx5_1") // port 2
	s.charDev("infiniband_mad", "issm2", "mlx5_1")
	s.charDev("infiniband_mad", "abi_version", "mlx5_1")
	s.mkdir("class/misc/rdma_cm")
	tests := []struct {
		dev  string
		want []string
	}{
		{"mlx5_0", []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm"}},
		{"mlx5_1", []string{"/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/umad2",
			"/dev/infiniband/issm1", "/dev/infiniband/issm2", "/dev/infiniband/rdma_cm"}},
		{"mlx5_1x", []string{"/dev/infiniband/rdma_cm"}},
	}
	for _, tt := range tests {
		if got := CharDevices(s.root, tt.dev); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("CharDevices(%s) = %v, want %v", tt.dev, got, tt.want)
		}
	}
}
