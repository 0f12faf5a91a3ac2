package dra

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestDiscoverOffered: only the devices the plugin's entries offer are
// published, by RDMA device or netdev name; the others are skipped with
// where the offer came from.
func TestDiscoverOffered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		offer Offer
		want  []string
	}{
		{"every device", Offer{All: true}, []string{"erdma-0", "mlx5-0", "rxe0"}},
		{"by RDMA device name", Offer{Names: map[string]bool{"mlx5_0": true}, From: "x"}, []string{"mlx5-0"}},
		{"by netdev name", Offer{Names: map[string]bool{"eth1": true}, From: "x"}, []string{"erdma-0"}},
		{"no entry", Offer{From: "no conflist"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSysfs(t)
			d := &Discoverer{System: &rdma.System{SysRoot: s.root, NL: sysfsOnlyNL{mode: "shared"}}, SysRoot: s.root,
				Offer: func() Offer { return tc.offer }}
			node, err := d.Discover()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, dev := range Devices(node) {
				got = append(got, dev.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("published %v, want %v", got, tc.want)
			}
			if len(node.Skipped) != 3-len(tc.want) {
				t.Errorf("skipped %v", node.Skipped)
			}
			for _, why := range node.Skipped {
				if !strings.Contains(why, "not in the devices list of "+tc.offer.From) {
					t.Errorf("skipped because %q", why)
				}
			}
		})
	}
}

// TestOfferOfConfDir: the offer is the union of the rdma-chain entries'
// devices lists; an entry without one offers all; no entry offers none.
func TestOfferOfConfDir(t *testing.T) {
	const primary = `{"type":"ptp","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`
	entry := func(devices string) string {
		return `{"cniVersion":"1.0.0","name":"net","plugins":[` + primary + `,{"type":"rdma-chain"` + devices + `}]}`
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		all   bool
		names []string
		from  string
	}{
		{"a devices list", map[string]string{"10-a.conflist": entry(`,"devices":["simrdma0","eth2"]`)}, false, []string{"eth2", "simrdma0"}, "10-a.conflist"},
		{"no devices list", map[string]string{"10-a.conflist": entry("")}, true, nil, "10-a.conflist"},
		{"two entries", map[string]string{"10-a.conflist": entry(`,"devices":["mlx5_0"]`), "20-b.conflist": entry(`,"devices":["mlx5_1"]`)},
			false, []string{"mlx5_0", "mlx5_1"}, "20-b.conflist"},
		{"no rdma-chain entry", map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"net","plugins":[` + primary + `]}`},
			false, nil, "no conflist"},
		{"no conflist", nil, false, nil, "no conflist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for f, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o := OfferOfConfDir(dir)
			var names []string
			for n := range o.Names {
				names = append(names, n)
			}
			slices.Sort(names)
			if o.All != tc.all || !reflect.DeepEqual(names, tc.names) || !strings.Contains(o.From, tc.from) {
				t.Fatalf("offer %+v, want all %v, names %v, from %q", o, tc.all, tc.names, tc.from)
			}
		})
	}
}
