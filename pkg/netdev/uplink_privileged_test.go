package netdev

import (
	"fmt"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// NodeUplinks on a host netns of 64 veths, each with an address and a
// route of its own table, and one main-table default route: what every
// exclusive-mode ADD pays for the check (printed as ns/op).
func BenchmarkNodeUplinks(b *testing.B) {
	testenv.Privileged(b)
	host, peer := netnstest.NewNS(b), netnstest.NewNS(b)
	for i := range 64 {
		name := fmt.Sprintf("ens%d", i)
		netnstest.AddVeth(b, host, peer, name, 1500, fmt.Sprintf("10.%d.0.2/24", i))
		netnstest.AddRoute(b, host, name, "0.0.0.0/0", fmt.Sprintf("10.%d.0.1", i), 100+i, 0)
	}
	netnstest.AddRoute(b, host, "ens7", "0.0.0.0/0", "10.7.0.1", 0, 0)
	err := host.Do(func(ns.NetNS) error {
		up, err := NodeUplinks(nil)
		if err != nil {
			return err
		}
		if len(up) != 1 || up["ens7"] == "" {
			return fmt.Errorf("uplinks %v, want ens7 only", up)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := NodeUplinks(nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
