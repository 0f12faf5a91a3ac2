package rdma

import (
	"strings"
	"testing"
)

func TestDRADeviceName(t *testing.T) {
	long := strings.Repeat("a", 62) + "_b"
	for in, want := range map[string]string{
		"mlx5_0": "mlx5-0", "erdma_0": "erdma-0", "rxe0": "rxe0", "simrdma0": "simrdma0",
		"mlx5_bond_0": "mlx5-bond-0", "MLX5_0": "mlx5-0", "_x_": "x", "___": "", "": "",
		"a.b:c": "a-b-c", long: strings.Repeat("a", 62), "ä0": "0",
	} {
		got := DRADeviceName(in)
		if got != want {
			t.Errorf("DRADeviceName(%q) = %q, want %q", in, got, want)
		}
		if len(got) > 63 || strings.HasPrefix(got, "-") || strings.HasSuffix(got, "-") || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Errorf("DRADeviceName(%q) = %q is not a DNS label", in, got)
		}
	}
}

func TestDRANameOwners(t *testing.T) {
	owners := DRANameOwners([]Device{{Name: "mlx5_0"}, {Name: "mlx5-0"}, {Name: "rxe0"}, {Name: "__"}})
	if len(owners["mlx5-0"]) != 2 || len(owners["rxe0"]) != 1 || len(owners) != 2 {
		t.Fatalf("DRANameOwners = %+v", owners)
	}
}

func TestSoftRoCEDRAName(t *testing.T) {
	long := strings.Repeat("e", 60)
	for in, want := range map[string]string{
		"eth1": "softroce-eth1", "ens1f0": "softroce-ens1f0", "bond0.100": "softroce-bond0-100", "Eth_1": "softroce-eth-1",
		"_": "", "": "", long: "softroce-" + strings.Repeat("e", 54),
	} {
		got := SoftRoCEDRAName(in)
		if got != want {
			t.Errorf("SoftRoCEDRAName(%q) = %q, want %q", in, got, want)
		}
		if got != "" && got == DRADeviceName(in) {
			t.Errorf("SoftRoCEDRAName(%q) = %q is the netdev's own DRA name", in, got)
		}
	}
}
