package netdev

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// BenchmarkNodeUplinks measures NodeUplinks on a host netns of 64
// veths, each with an address and a route of its own table, and one
// main-table default route: what every exclusive-mode ADD pays for the
// check (printed as ns/op), without and with nodeAddresses (one more
// address dump).
func BenchmarkNodeUplinks(b *testing.B) {
	testenv.Privileged(b)
	host, peer := netnstest.NewNS(b), netnstest.NewNS(b)
	for i := range 64 {
		name := fmt.Sprintf("ens%d", i)
		netnstest.AddVeth(b, host, peer, name, 1500, fmt.Sprintf("10.%d.0.2/24", i))
		netnstest.AddRoute(b, host, name, "0.0.0.0/0", fmt.Sprintf("10.%d.0.1", i), 100+i, 0)
	}
	netnstest.AddRoute(b, host, "ens7", "0.0.0.0/0", "10.7.0.1", 0, 0)
	for _, bc := range []struct {
		name  string
		addrs []netip.Addr
		want  []string
	}{
		{"default-route", nil, []string{"ens7"}},
		{"node-address", []netip.Addr{netip.MustParseAddr("10.42.0.2")}, []string{"ens42", "ens7"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			err := host.Do(func(ns.NetNS) error {
				up, err := NodeUplinks(bc.addrs)
				if err != nil {
					return err
				}
				if got := slices.Sorted(maps.Keys(up)); !slices.Equal(got, bc.want) {
					return fmt.Errorf("uplinks %v, want %v", up, bc.want)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := NodeUplinks(bc.addrs); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
