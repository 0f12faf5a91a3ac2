package config

import (
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// TestResultEveryVersion checks that a primary's result as ptp writes it
// converts at every version with a result type.
func TestResultEveryVersion(t *testing.T) {
	body := `{"interfaces":[{"name":"veth1","mac":"02:00:00:00:00:02"},` + eth0 + `],
		"ips":[{"interface":1,"address":"10.1.0.5/16","gateway":"10.1.0.1"},{"address":"fd00::5/64"}],
		"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],"dns":{"nameservers":["10.96.0.10"]}}`
	for _, v := range SupportedVersions {
		t.Run(v, func(t *testing.T) {
			conf, warnings, err := Parse([]byte(prevAt(v, body)))
			if err != nil || len(warnings) != 0 {
				t.Fatalf("Parse: %v %q", err, warnings)
			}
			r, err := conf.Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Interfaces) != 2 || r.Interfaces[1].Sandbox != "/run/netns/p" || len(r.IPs) != 2 ||
				*r.IPs[0].Interface != 1 || r.IPs[1].Interface != nil || len(r.Routes) != 1 || len(r.DNS.Nameservers) != 1 {
				t.Errorf("Result = %+v", r)
			}
			assertConverts(t, conf)
		})
	}
}

// assertConverts converts the conf's prevResult to every supported version.
func assertConverts(t *testing.T, conf *NetConf) {
	t.Helper()
	if conf.PrevResult == nil {
		return
	}
	r, err := conf.Result()
	if err != nil {
		t.Fatalf("Result: %v", err)
	}
	for _, v := range SupportedVersions {
		if _, err := conf.PrevResult.GetAsVersion(v); err != nil {
			t.Errorf("prevResult to %s: %v", v, err)
		}
		if _, err := r.GetAsVersion(v); err != nil {
			t.Errorf("Result() to %s: %v", v, err)
		}
	}
}

// TestResultHandBuilt checks that a NetConf not from Parse (as in other
// packages' tests) gets the same checks before the library converts it.
func TestResultHandBuilt(t *testing.T) {
	_, cidr, _ := net.ParseCIDR("10.0.0.0/24")
	cases := []struct {
		name  string
		r     types.Result
		field string
	}{
		{"040 null interface", &types040.Result{CNIVersion: "0.4.0", Interfaces: []*types040.Interface{nil}}, `"prevResult.interfaces[0]"`},
		{"040 null ip", &types040.Result{CNIVersion: "0.4.0", IPs: []*types040.IPConfig{nil}}, `"prevResult.ips[0]"`},
		{"040 index", &types040.Result{CNIVersion: "0.3.1", IPs: []*types040.IPConfig{{Interface: types040.Int(3), Address: *cidr}}}, `"prevResult.ips[0].interface"`},
		{"100 null interface", &types100.Result{CNIVersion: "1.0.0", Interfaces: []*types100.Interface{nil}}, `"prevResult.interfaces[0]"`},
		{"100 null route", &types100.Result{CNIVersion: "1.1.0", Routes: []*types.Route{nil}}, `"prevResult.routes[0]"`},
		{"100 index", &types100.Result{CNIVersion: "1.1.0", IPs: []*types100.IPConfig{{Interface: types100.Int(-1)}}}, `"prevResult.ips[0].interface"`},
		{"typed nil", (*types100.Result)(nil), `"prevResult"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := &NetConf{}
			conf.PrevResult = tc.r
			_, err := conf.Result()
			assertCNIError(t, err, types.ErrDecodingFailure, tc.field)
		})
	}
	_, err := (&NetConf{}).Result()
	assertCNIError(t, err, types.ErrInvalidNetworkConfig, "prevResult")
}

// TestParseWithoutPrevResult checks that DEL, GC and STATUS do not fail on a
// prevResult they never read; the configuration is still checked.
func TestParseWithoutPrevResult(t *testing.T) {
	for _, tc := range hostilePrevResults() {
		conf, warnings, err := ParseWithoutPrevResult([]byte(tc.input))
		if err != nil || conf.PrevResult != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "prevResult ignored") || !strings.Contains(warnings[0], tc.field) {
			t.Errorf("%s: warnings %q do not name %s", tc.name, warnings, tc.field)
		}
	}
	conf, warnings, err := ParseWithoutPrevResult([]byte(prevAt("1.0.0", `{"interfaces":[`+eth0+`]}`)))
	if err != nil || conf.PrevResult != nil || len(warnings) != 0 {
		t.Errorf("valid prevResult: %v %v %q", err, conf, warnings)
	}
	_, _, err = ParseWithoutPrevResult([]byte(prevAt("1.0.0", `{}`)[:20]))
	assertCNIError(t, err, types.ErrInvalidNetworkConfig, "")
	_, _, err = ParseWithoutPrevResult([]byte(confAt("1.0.0", `,"mode":"x","prevResult":[]`)))
	assertCNIError(t, err, types.ErrInvalidNetworkConfig, `"mode"`)
}
