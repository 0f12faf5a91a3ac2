package chain

import (
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// specs are the CDI specs a test writes: claim UID -> DRA device ->
// configuration (nil: the device without the annotation).
type specs map[string]map[string]*config.ClaimConfig

func on(b bool) *bool { return &b }

// TestAddClaimConfig checks what ADD does with the configuration of the
// pod's claims, read from their CDI specs: each field applied to the
// pod's attachment and recorded; claims that disagree, an ifName that
// clashes, a field the network cannot serve and a spec that cannot be
// read are refused (113) before any change.
func TestAddClaimConfig(t *testing.T) {
	a0, b1 := cfgClaim("a", uidA, "mlx5-0"), cfgClaim("b", uidB, "mlx5-1")
	b0 := cfgClaim("b", uidB, "mlx5-0")
	one := func(uid, dev string, cfg *config.ClaimConfig) specs { return specs{uid: {dev: cfg}} }
	two := func(a, b *config.ClaimConfig) specs { return specs{uidA: {"mlx5-0": a}, uidB: {"mlx5-1": b}} }
	const block = `,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","dataDir":"/run/ipam"}`
	cases := []struct {
		name      string
		mode      rdma.Mode // "": shared
		conf      string
		claims    []podres.ClaimDevice
		specs     specs
		want      []string // AddChild, MoveToPod and IPAMAdd calls
		wantCode  uint
		wantWords string
	}{
		{name: "no annotation: the entry's", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", nil),
			want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "no CDI device reported: the entry's", claims: []podres.ClaimDevice{claimDev("a", "mlx5-0")},
			want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "another served driver: not read", conf: `,"draDrivers":["rdma-chain.github.io","other.example.com"]`,
			claims: []podres.ClaimDevice{{ClaimNamespace: "default", ClaimName: "o", Driver: "other.example.com", Device: "mlx5-0",
				CDIDevices: []string{cdiIDPrefix + uidA + "-mlx5-0"}}},
			want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "ifName", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{IfName: "roce"}),
			want: []string{"AddChild ipvlan l2 eth1 roce"}},
		{name: "ifName of one of two devices", claims: []podres.ClaimDevice{a0, b1}, specs: two(&config.ClaimConfig{IfName: "roce"}, nil),
			want: []string{"AddChild ipvlan l2 eth1 roce", "AddChild ipvlan l2 eth2 rdma1"}},
		{name: "ifName in exclusive mode", mode: rdma.ModeExclusive, claims: []podres.ClaimDevice{a0},
			specs: one(uidA, "mlx5-0", &config.ClaimConfig{IfName: "roce"}), want: []string{"MoveToPod eth1 roce"}},
		{name: "ifName is CNI_IFNAME", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{IfName: "eth0"}),
			wantCode: CodeClaimConfig, wantWords: "claim default/a: ifName eth0 is the pod's interface of the primary plugin"},
		{name: "one ifName for two devices", claims: []podres.ClaimDevice{a0, b1},
			specs:    two(&config.ClaimConfig{IfName: "roce"}, &config.ClaimConfig{IfName: "roce"}),
			wantCode: CodeClaimConfig, wantWords: "claims default/a and default/b give two RDMA devices (mlx5_0, mlx5_1) one ifName roce"},
		{name: "two ifNames for one device", claims: []podres.ClaimDevice{a0, b0},
			specs:    specs{uidA: {"mlx5-0": {IfName: "roce"}}, uidB: {"mlx5-0": {IfName: "ib"}}},
			wantCode: CodeClaimConfig, wantWords: "claims default/a and default/b give RDMA device mlx5_0 two ifNames (roce, ib)"},
		{name: "ifName of another interface", claims: []podres.ClaimDevice{a0, b1}, specs: two(nil, &config.ClaimConfig{IfName: "rdma0"}),
			wantCode: CodeClaimConfig, wantWords: "RDMA devices mlx5_0 and mlx5_1 would both be rdma0"},
		{name: "sharedLink macvlan", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "macvlan"}),
			want: []string{"AddChild macvlan bridge eth1 rdma0"}},
		{name: "sharedLink: the entry's mode for its type", conf: `,"sharedLink":{"type":"macvlan","mode":"private"}`,
			claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "macvlan"}),
			want: []string{"AddChild macvlan private eth1 rdma0"}},
		{name: "sharedLink: the default mode for another type", conf: `,"sharedLink":{"type":"macvlan","mode":"private"}`,
			claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "ipvlan"}),
			want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "sharedLink none", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "none"})},
		{name: "sharedLink in exclusive mode: not applied", mode: rdma.ModeExclusive, claims: []podres.ClaimDevice{a0},
			specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "macvlan"}), want: []string{"MoveToPod eth1 rdma0"}},
		{name: "sharedLink agreed", claims: []podres.ClaimDevice{a0, b1},
			specs: two(&config.ClaimConfig{SharedLink: "macvlan"}, &config.ClaimConfig{SharedLink: "macvlan", IfName: "ib"}),
			want:  []string{"AddChild macvlan bridge eth1 rdma0", "AddChild macvlan bridge eth2 ib"}},
		{name: "sharedLink disagreed", claims: []podres.ClaimDevice{a0, b1},
			specs:    two(&config.ClaimConfig{SharedLink: "macvlan"}, &config.ClaimConfig{SharedLink: "ipvlan"}),
			wantCode: CodeClaimConfig, wantWords: "claims default/a and default/b configure sharedLink differently (macvlan, ipvlan)"},
		{name: "ipv6 false with podIPv6Block: no lease", conf: block, claims: []podres.ClaimDevice{a0},
			specs: one(uidA, "mlx5-0", &config.ClaimConfig{IPv6: on(false)}), want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "ipv6 true with podIPv6Block", conf: block, claims: []podres.ClaimDevice{a0},
			specs: one(uidA, "mlx5-0", &config.ClaimConfig{IPv6: on(true)}), want: []string{"AddChild ipvlan l2 eth1 rdma0", "IPAMAdd c1 rdma0"}},
		{name: "ipv6 false in exclusive mode: no lease", mode: rdma.ModeExclusive, conf: block, claims: []podres.ClaimDevice{a0},
			specs: one(uidA, "mlx5-0", &config.ClaimConfig{IPv6: on(false)}), want: []string{"MoveToPod eth1 rdma0"}},
		{name: "ipv6 false without podIPv6Block: the ipam's lease stays", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{IPv6: on(false)}),
			want: []string{"AddChild ipvlan l2 eth1 rdma0"}},
		{name: "ipv6 true without podIPv6Block", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{IPv6: on(true)}),
			wantCode: CodeClaimConfig, wantWords: "claim default/a: field ipv6 is true but network rdmanet has no podIPv6Block"},
		{name: "ipv6 disagreed", conf: block, claims: []podres.ClaimDevice{a0, b1},
			specs:    two(&config.ClaimConfig{IPv6: on(true)}, &config.ClaimConfig{IPv6: on(false)}),
			wantCode: CodeClaimConfig, wantWords: "claims default/a and default/b configure ipv6 differently (true, false)"},
		{name: "smcr disagreed", claims: []podres.ClaimDevice{a0, b1},
			specs:    two(&config.ClaimConfig{SMCR: on(false)}, &config.ClaimConfig{SMCR: on(true)}),
			wantCode: CodeClaimConfig, wantWords: "claims default/a and default/b configure smcr differently (false, true)"},
		{name: "spec missing", claims: []podres.ClaimDevice{a0},
			wantCode: CodeClaimConfig, wantWords: "claim default/a: cannot read its CDI spec"},
		{name: "spec without the device", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-1", nil),
			wantCode: CodeClaimConfig, wantWords: "claim default/a: its CDI spec"},
		{name: "CDI device of another claim device", claims: []podres.ClaimDevice{{ClaimNamespace: "default", ClaimName: "a", Driver: draDriver,
			Device: "mlx5-0", CDIDevices: []string{cdiIDPrefix + uidA + "-mlx5-1"}}}, specs: one(uidA, "mlx5-1", nil),
			wantCode: CodeClaimConfig, wantWords: `claim default/a, DRA device "mlx5-0": its CDI device`},
		{name: "annotation invalid", claims: []podres.ClaimDevice{a0}, specs: one(uidA, "mlx5-0", &config.ClaimConfig{SharedLink: "vxlan"}),
			wantCode: CodeClaimConfig, wantWords: "claim default/a: annotation rdma-chain.github.io/config of device " + uidA + "-mlx5-0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mode := cmpMode(tc.mode)
			w := &world{mode: mode, devices: []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5_1", "eth2")}, claims: tc.claims,
				prefixes: map[string][]netip.Prefix{"eth1": {netip.MustParsePrefix("fd00:1::5/64")}, "eth2": {netip.MustParsePrefix("fd00:2::5/64")}}}
			dir, cdi := t.TempDir(), t.TempDir()
			for uid, devs := range tc.specs {
				writeSpec(t, cdi, uid, devs)
			}
			err := w.plugin().Add(cmd(dir, `,"cdiDir":"`+cdi+`"`+tc.conf, prevResult100))
			if tc.wantCode != 0 {
				wantCode(t, err, tc.wantCode, tc.wantWords)
				if got := w.callsNamed("MoveToPod", "AddChild", "IPAMAdd"); len(got) != 0 || len(stateFiles(t, dir)) != 0 {
					t.Errorf("refused ADD changed %v, records %v", got, stateFiles(t, dir))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := w.callsNamed("MoveToPod", "AddChild", "IPAMAdd"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("calls %q, want %q", got, tc.want)
			}
			checkClaimRecord(t, onlyRecord(t, dir), w)
		})
	}
}

func cmpMode(m rdma.Mode) rdma.Mode {
	if m == "" {
		return rdma.ModeShared
	}
	return m
}

// checkClaimRecord checks that the record keeps what the calls applied:
// each link's pod name and kind, and a lease only where one was taken.
func checkClaimRecord(t *testing.T, rec *state.Record, w *world) {
	t.Helper()
	leases := strings.Join(w.callsNamed("IPAMAdd"), ";")
	children := strings.Join(w.callsNamed("AddChild", "MoveToPod"), ";")
	for _, l := range rec.Links {
		if l.IPAM != strings.Contains(leases, " "+l.PodName) || l.IPAM != (l.IPAMRange != "") {
			t.Errorf("link %+v: lease recorded %v, IPAM calls %q", l, l.IPAM, leases)
		}
		if l.Kind == state.LinkNone {
			if l.PodName != "" || children != "" {
				t.Errorf("link %+v of kind none, calls %q", l, children)
			}
			continue
		}
		if !strings.Contains(children, string(l.Kind)+" ") && l.Kind != state.LinkMoved || !strings.Contains(children, " "+l.PodName) {
			t.Errorf("link %+v not as made: %q", l, children)
		}
	}
}

// TestClaimConfigDelFromRecord checks that DEL gives back what a claim's
// configuration made (a macvlan child under the claim's name) from the
// record alone: the claim's spec is gone by then.
func TestClaimConfigDelFromRecord(t *testing.T) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("mlx5_0", "eth1")}, claims: []podres.ClaimDevice{cfgClaim("a", uidA, "mlx5-0")}}
	dir, cdi := t.TempDir(), t.TempDir()
	writeSpec(t, cdi, uidA, map[string]*config.ClaimConfig{"mlx5-0": {IfName: "roce", SharedLink: "macvlan"}})
	conf := `,"cdiDir":"` + cdi + `"`
	if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
		t.Fatal(err)
	}
	rec := onlyRecord(t, dir)
	if len(rec.Links) != 1 || rec.Links[0].PodName != "roce" || rec.Links[0].Kind != state.LinkMACVlan {
		t.Fatalf("record links %+v", rec.Links)
	}
	if err := os.Remove(cdiSpecPath(cdi, uidA)); err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	if got := w.callsNamed("DelChild"); len(got) != 1 || !strings.HasPrefix(got[0], "DelChild /var/run/netns/pod roce ") {
		t.Errorf("DEL calls %v, want the child roce deleted", got)
	}
}

// TestClaimConfigSMCR checks the claim's smcr against the annotation and
// the network's smcr settings: on from a DeviceClass whatever
// smcr.namespaces says, never with smcr.enabled false; off even for an
// annotated pod.
func TestClaimConfigSMCR(t *testing.T) {
	const annotation = `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}`
	cases := []struct {
		name, conf string
		smcr       *bool // the claim's; nil: no configuration
		wantOn     bool
		wantLog    string
	}{
		{name: "annotation alone", conf: annotation, wantOn: true},
		{name: "annotation outside smcr.namespaces", conf: annotation + `,"smcr":{"namespaces":["other"]}`,
			wantLog: "is not in smcr.namespaces"},
		{name: "claim on", smcr: on(true), wantOn: true, wantLog: "claim configuration: SMC-R on"},
		{name: "claim on inside smcr.namespaces", conf: `,"smcr":{"namespaces":["default"]}`, smcr: on(true), wantOn: true},
		{name: "claim on outside smcr.namespaces", conf: `,"smcr":{"namespaces":["other"]}`, smcr: on(true),
			wantLog: `is not in smcr.namespaces of network rdmanet`},
		{name: "claim on, smcr.enabled false", conf: `,"smcr":{"enabled":false}`, smcr: on(true),
			wantLog: "claim configuration smcr true ignored: smcr.enabled is false"},
		{name: "claim off, annotated", conf: annotation, smcr: on(false), wantLog: "overridden: the claim's configuration sets smcr false"},
		{name: "claim off", smcr: on(false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, dir, cdi := erdmaWorld(t), t.TempDir(), t.TempDir()
			w.claims = []podres.ClaimDevice{cfgClaim("a", uidA, "erdma-0")}
			cfg := &config.ClaimConfig{SMCR: tc.smcr}
			if tc.smcr == nil {
				cfg = nil
			}
			writeSpec(t, cdi, uidA, map[string]*config.ClaimConfig{"erdma-0": cfg})
			if err := w.plugin().Add(cmd(dir, `,"cdiDir":"`+cdi+`","sharedLink":{"type":"none"}`+tc.conf, prevResult100)); err != nil {
				t.Fatal(err)
			}
			rec := onlyRecord(t, dir)
			if got := rec.SMC != nil && len(w.pnet["/var/run/netns/pod"]) == 1; got != tc.wantOn {
				t.Errorf("SMC-R on %v (record %+v, tables %v), want %v", got, rec.SMC, w.pnet, tc.wantOn)
			}
			if !strings.Contains(w.stderr.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, w.stderr.String())
			}
		})
	}
}

// TestClaimConfigSoftRoCE checks that a podSoftRoCE network keeps its
// rule: its pods' rxe devices need macvlan children.
func TestClaimConfigSoftRoCE(t *testing.T) {
	for _, tc := range []struct {
		link, want string
	}{{"macvlan", ""}, {"ipvlan", "field sharedLink is ipvlan but network rdmanet gives each pod a soft-RoCE device"}, {"none", "field sharedLink is none"}} {
		t.Run(tc.link, func(t *testing.T) {
			w, dir, cdi := softRoCEWorld(), t.TempDir(), t.TempDir()
			w.allocs, w.claims = nil, []podres.ClaimDevice{cfgClaim("nic", uidA, "softroce-eth1")}
			writeSpec(t, cdi, uidA, map[string]*config.ClaimConfig{"softroce-eth1": {SharedLink: tc.link}})
			err := w.plugin().Add(cmd(dir, softRoCEConf(dir+"/di.json")+`,"cdiDir":"`+cdi+`"`, prevResult100))
			if tc.want != "" {
				wantCode(t, err, CodeClaimConfig, tc.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := w.callsNamed("AddChild"); len(got) != 1 || !strings.HasPrefix(got[0], "AddChild macvlan bridge eth1 ") {
				t.Errorf("children %v", got)
			}
		})
	}
}
