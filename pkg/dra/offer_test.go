package dra

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestDiscoverOffered checks that only the devices the plugin's entries
// offer are published, by RDMA device or netdev name; the others are
// skipped with where the offer came from.
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
			if got := publishedNames(node); !reflect.DeepEqual(got, tc.want) {
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

// publishedNames is the DRA names of the devices node's slice holds.
func publishedNames(node *Node) []string {
	var out []string
	for _, dev := range Devices(node) {
		out = append(out, dev.Name)
	}
	return out
}

// TestOfferOfConfDir checks that the offer is the union of the
// rdma-chain entries' devices lists; an entry without one offers all; a
// podSoftRoCE entry offers its NIC as a soft-RoCE NIC and no RDMA device;
// no entry offers none.
func TestOfferOfConfDir(t *testing.T) {
	const primary = `{"type":"ptp","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`
	entry := func(devices string) string {
		return `{"cniVersion":"1.0.0","name":"net","plugins":[` + primary + `,{"type":"rdma-chain"` + devices + `}]}`
	}
	for _, tc := range []struct {
		name     string
		files    map[string]string
		all      bool
		names    []string
		from     string
		softRoCE []string
	}{
		{"a devices list", map[string]string{"10-a.conflist": entry(`,"devices":["simrdma0","eth2"]`)}, false, []string{"eth2", "simrdma0"}, "10-a.conflist", nil},
		{"no devices list", map[string]string{"10-a.conflist": entry("")}, true, nil, "10-a.conflist", nil},
		{"two entries", map[string]string{"10-a.conflist": entry(`,"devices":["mlx5_0"]`), "20-b.conflist": entry(`,"devices":["mlx5_1"]`)},
			false, []string{"mlx5_0", "mlx5_1"}, "20-b.conflist", nil},
		{"no rdma-chain entry", map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"net","plugins":[` + primary + `]}`},
			false, nil, "no conflist", nil},
		{"no conflist", nil, false, nil, "no conflist", nil},
		{"podSoftRoCE", map[string]string{"10-a.conflist": entry(`,"podSoftRoCE":"eth1"`)}, false, nil, "10-a.conflist", []string{"eth1"}},
		{"podSoftRoCE and a devices list", map[string]string{"10-a.conflist": entry(`,"podSoftRoCE":"eth1"`), "20-b.conflist": entry(`,"devices":["mlx5_0"]`)},
			false, []string{"mlx5_0"}, "20-b.conflist", []string{"eth1"}},
		{"podSoftRoCE and an entry without a list", map[string]string{"10-a.conflist": entry(""), "20-b.conflist": entry(`,"podSoftRoCE":"eth1"`)},
			true, nil, "20-b.conflist", []string{"eth1"}},
		{"two podSoftRoCE entries", map[string]string{"10-a.conflist": entry(`,"podSoftRoCE":"eth2"`), "20-b.conflist": entry(`,"podSoftRoCE":"eth1"`)},
			false, nil, "20-b.conflist", []string{"eth1", "eth2"}},
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
			var soft []string
			for n := range o.SoftRoCE {
				soft = append(soft, n)
			}
			slices.Sort(soft)
			if o.All != tc.all || !reflect.DeepEqual(names, tc.names) || !strings.Contains(o.From, tc.from) || !reflect.DeepEqual(soft, tc.softRoCE) {
				t.Fatalf("offer %+v, want all %v, names %v, from %q, soft-RoCE %v", o, tc.all, tc.names, tc.from, tc.softRoCE)
			}
		})
	}
}

// TestDiscoverWithoutUplinks checks that in exclusive mode a device whose
// netdev carries the node's traffic (what netdev.NodeUplinks maps, given
// the entries' nodeAddresses) is not published, and says why; in shared
// mode it is, and the uplinks are not read. A failed read fails the
// discovery.
func TestDiscoverWithoutUplinks(t *testing.T) {
	nodeAddr := netip.MustParseAddr("192.168.50.12")
	for _, tc := range []struct {
		name    string
		mode    string
		uplinks map[string]string
		err     error
		want    []string
		skipped string
	}{
		{"exclusive: eth1 holds a node address", "exclusive", map[string]string{"eth1": "the node's address 192.168.50.12 (nodeAddresses)"}, nil,
			[]string{"mlx5-0", "rxe0"}, "exclusive mode: its netdev eth1 carries the node's address 192.168.50.12 (nodeAddresses), which the plugin never moves into a pod"},
		{"exclusive: a bond's port carries the default route", "exclusive", map[string]string{"bond0": "the node's IPv4 default route"}, nil,
			[]string{"erdma-0", "rxe0"}, "netdev bond0 carries the node's IPv4 default route"},
		{"exclusive: no uplink among them", "exclusive", map[string]string{"eth9": "x"}, nil, []string{"erdma-0", "mlx5-0", "rxe0"}, ""},
		{"shared: published", "shared", map[string]string{"eth1": "x"}, nil, []string{"erdma-0", "mlx5-0", "rxe0"}, ""},
		{"exclusive: netlink fails", "exclusive", nil, errors.New("netlink: permission denied"), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSysfs(t)
			var asked [][]netip.Addr
			d := &Discoverer{System: &rdma.System{SysRoot: s.root, NL: sysfsOnlyNL{mode: tc.mode}}, SysRoot: s.root,
				Offer: func() Offer { return Offer{All: true, NodeAddrs: []netip.Addr{nodeAddr}} },
				Uplinks: func(addrs []netip.Addr) (map[string]string, error) {
					asked = append(asked, addrs)
					return tc.uplinks, tc.err
				}}
			node, err := d.Discover()
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Discover: %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := publishedNames(node); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("published %v, want %v", got, tc.want)
			}
			if tc.mode == "exclusive" && (len(asked) != 1 || !slices.Equal(asked[0], []netip.Addr{nodeAddr})) {
				t.Errorf("uplinks asked with %v, want the offer's nodeAddresses once", asked)
			}
			if tc.mode == "shared" && len(asked) != 0 {
				t.Errorf("uplinks read in shared mode")
			}
			var why []string
			for _, w := range node.Skipped {
				why = append(why, w)
			}
			if (tc.skipped == "") != (len(why) == 0) || (tc.skipped != "" && !strings.Contains(strings.Join(why, "|"), tc.skipped)) {
				t.Errorf("skipped %q, want %q", why, tc.skipped)
			}
		})
	}
}

// TestOfferNodeAddresses checks that the offer carries the union of the
// entries' nodeAddresses, each once.
func TestOfferNodeAddresses(t *testing.T) {
	dir := t.TempDir()
	entry := func(addrs string) string {
		return `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ptp"},{"type":"rdma-chain","nodeAddresses":[` + addrs + `]}]}`
	}
	for f, data := range map[string]string{"10-a.conflist": entry(`"192.168.50.12","fd00::12"`), "20-b.conflist": entry(`"fd00::12","10.0.0.12"`)} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := OfferOfConfDir(dir).NodeAddrs
	want := []netip.Addr{netip.MustParseAddr("192.168.50.12"), netip.MustParseAddr("fd00::12"), netip.MustParseAddr("10.0.0.12")}
	if !slices.Equal(got, want) {
		t.Errorf("NodeAddrs %v, want %v", got, want)
	}
}

// TestDiscoverKeepsOfferOnLoss checks that a read of the conflists
// without an rdma-chain entry within the grace period of the last one
// with an entry publishes that one's devices; past it, none. An entry
// back, or a changed one, is published at once.
func TestDiscoverKeepsOfferOnLoss(t *testing.T) {
	const grace = time.Minute
	entry := func(devices string) string {
		return `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ptp","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}},` +
			`{"type":"rdma-chain","devices":[` + devices + `]}]}`
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "10-net.conflist")
	s := testSysfs(t)
	now := t0
	d := &Discoverer{System: &rdma.System{SysRoot: s.root, NL: sysfsOnlyNL{mode: "shared"}}, SysRoot: s.root,
		Offer: func() Offer { return OfferOfConfDir(dir) }, OfferGrace: grace, Now: func() time.Time { return now }}
	for _, step := range []struct {
		name string
		conf string // "" removes the conflist; "-" writes one without an rdma-chain entry
		at   time.Duration
		want []string
	}{
		{"no entry yet", "", 0, nil},
		{"an entry", `"mlx5_0"`, time.Second, []string{"mlx5-0"}},
		{"the conflist gone", "", 2 * time.Second, []string{"mlx5-0"}},
		{"rewritten without the entry", "-", 30 * time.Second, []string{"mlx5-0"}},
		{"still gone at the end of the grace", "", 2*time.Second + grace - time.Nanosecond, []string{"mlx5-0"}},
		{"past the grace", "", 2*time.Second + grace, nil},
		{"still gone", "", 10 * time.Minute, nil},
		{"back, another device", `"rxe0"`, 11 * time.Minute, []string{"rxe0"}},
		{"a changed entry: at once", `"mlx5_0","rxe0"`, 12 * time.Minute, []string{"mlx5-0", "rxe0"}},
		{"gone again: a new grace", "", 13 * time.Minute, []string{"mlx5-0", "rxe0"}},
		{"within it", "", 13*time.Minute + grace/2, []string{"mlx5-0", "rxe0"}},
		{"past it", "", 14 * time.Minute, nil},
	} {
		switch step.conf {
		case "":
			if err := os.RemoveAll(conf); err != nil {
				t.Fatal(err)
			}
		case "-":
			if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ptp"}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(conf, []byte(entry(step.conf)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		now = t0.Add(step.at)
		node, err := d.Discover()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := publishedNames(node); !reflect.DeepEqual(got, step.want) {
			t.Fatalf("%s: published %v, want %v (skipped %v)", step.name, got, step.want, node.Skipped)
		}
	}
}
