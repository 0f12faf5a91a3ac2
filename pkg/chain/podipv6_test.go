package chain

import (
	"errors"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const withBlock = `,"podSelection":"all","podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","dataDir":"/run/ipam"}`

// blockWorld offers rxe0 on eth1 (fd00:1::/64) and rxe1 on eth2 (fd00:2::/64).
func blockWorld(mode rdma.Mode) *world {
	return &world{mode: mode, devices: []rdma.Device{rxe("rxe0", "eth1"), rxe("rxe1", "eth2")},
		prefixes: map[string][]netip.Prefix{
			"eth1": {netip.MustParsePrefix("fe80::1/64"), netip.MustParsePrefix("fd00:1::5/64")},
			"eth2": {netip.MustParsePrefix("fd00:2::5/64")},
		}}
}

var subnetRE = regexp.MustCompile(`"ranges":\[\[\{"subnet":"([^"]*)"\}\]\]`)

// ipamRanges maps "ADD rdma0" / "DEL rdma1" to the range its IPAM call got.
func ipamRanges(t *testing.T, w *world) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range w.ipamConfs {
		verb, rest, _ := strings.Cut(c, " ")
		ifName, stdin, _ := strings.Cut(rest, " ")
		m := subnetRE.FindStringSubmatch(stdin)
		if m == nil {
			t.Fatalf("IPAM %s %s got no rendered range: %s", verb, ifName, stdin)
		}
		out[verb+" "+ifName] = m[1]
	}
	return out
}

// TestPodIPv6BlockPerDevice checks that each pod interface's lease comes
// from its own device's /64 with the block's host bits, and DEL releases
// it through the same range, in both modes.
func TestPodIPv6BlockPerDevice(t *testing.T) {
	for _, mode := range []rdma.Mode{rdma.ModeShared, rdma.ModeExclusive} {
		t.Run(string(mode), func(t *testing.T) {
			w := blockWorld(mode)
			dir := t.TempDir()
			conf := withBlock + `,"devices":["rxe0","rxe1"]`
			if mode == rdma.ModeExclusive {
				conf = withBlock // one device per pod: the first free
			}
			if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
				t.Fatal(err)
			}
			if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"ADD rdma0": "fd00:1::f:0:c00/124", "DEL rdma0": "fd00:1::f:0:c00/124"}
			if mode == rdma.ModeShared {
				want["ADD rdma1"], want["DEL rdma1"] = "fd00:2::f:0:c00/124", "fd00:2::f:0:c00/124"
			}
			got := ipamRanges(t, w)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s got range %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if len(got) != len(want) || len(stateFiles(t, dir)) != 0 {
				t.Errorf("IPAM calls %v, records %v", got, stateFiles(t, dir))
			}
		})
	}
}

// TestPodIPv6BlockRefusals checks that a netdev without a global /64
// and an exhausted block are 109, naming device, netdev and block;
// nothing is left behind.
func TestPodIPv6BlockRefusals(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(*world)
		words []string
	}{
		{"no global /64", func(w *world) { w.prefixes["eth2"] = []netip.Prefix{netip.MustParsePrefix("fe80::2/64")} },
			[]string{"rxe1", "eth2", "no global IPv6 /64", "::f:0:c00/124"}},
		{"several /64s", func(w *world) {
			w.prefixes["eth2"] = append(w.prefixes["eth2"], netip.MustParsePrefix("fd00:3::5/64"))
		}, []string{"rxe1", "eth2", "ambiguous"}},
		{"block exhausted", func(w *world) {
			w.failOn = map[string]error{"IPAMAdd": types.NewError(types.ErrInternal,
				"failed to allocate for range 0: no IP addresses available in range set: fd00:2::f:0:c01-fd00:2::f:0:c0f", "")}
			w.failNth = map[string]int{"IPAMAdd": 2}
		}, []string{"fd00:2::f:0:c00/124", "eth2", "rxe1", "exhausted"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := blockWorld(rdma.ModeShared)
			tt.setup(w)
			dir := t.TempDir()
			err := w.plugin().Add(cmd(dir, withBlock+`,"devices":["rxe0","rxe1"]`, prevResult100))
			for _, word := range tt.words {
				wantCode(t, err, CodePodIPv6, word)
			}
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("records left: %v", f)
			}
			if adds, dels := len(filterCalls(w.calls, "AddChild")), len(filterCalls(w.calls, "DelChild")); adds != dels {
				t.Errorf("%d children created, %d deleted: %v", adds, dels, w.calls)
			}
		})
	}
}

// TestPodIPv6BlockConfig checks that the block is validated strictly;
// its ranges come from the plugin only.
func TestPodIPv6BlockConfig(t *testing.T) {
	for _, tt := range []struct{ conf, word string }{
		{`,"podIPv6Block":"::f:0:c00/124"`, "needs an ipam section"},
		{`,"podIPv6Block":"10.0.0.0/24","ipam":{"type":"host-local"}`, "IPv6 block"},
		{`,"podIPv6Block":"::f:0:c00/48","ipam":{"type":"host-local"}`, "64-126"},
		{`,"podIPv6Block":"::f:0:c01/124","ipam":{"type":"host-local"}`, "past its length"},
		{`,"podIPv6Block":"fd00::f:0:c00/124","ipam":{"type":"host-local"}`, "upper 64"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","ranges":[[{"subnet":"fd00::/64"}]]}`, "ipam.ranges"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","Subnet":"10.99.0.0/24"}`, "ipam.Subnet"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","RANGES":[]}`, "ipam.RANGES"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","rangestart":"10.99.0.5"}`, "ipam.rangestart"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","Range":{}}`, "ipam.Range"},
		{`,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","\u017fubnet":"10.99.0.0/24"}`, "ipam.\u017fubnet"},
	} {
		t.Run(tt.word, func(t *testing.T) {
			w := blockWorld(rdma.ModeShared)
			err := w.plugin().Add(cmd(t.TempDir(), `,"podSelection":"all"`+tt.conf, prevResult100))
			wantCode(t, err, types.ErrInvalidNetworkConfig, tt.word)
			var te *types.Error
			if errors.As(err, &te) && !strings.Contains(te.Msg+te.Details, "podIPv6Block") && !strings.HasPrefix(tt.word, "ipam.") {
				t.Errorf("error does not name podIPv6Block: %v", err)
			}
		})
	}
}
