package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCaseVariantKeysIgnored checks that a key that differs from a known
// one only in case is reported and never used, at every level Parse
// decodes.
func TestCaseVariantKeysIgnored(t *testing.T) {
	cases := []struct {
		name, extra, warned string
		unused              func(*NetConf) bool
	}{
		{"PodSelection", `,"PodSelection":"all"`, `"PodSelection"`,
			func(c *NetConf) bool { return c.PodSelection == SelectRequested }},
		{"DATADIR", `,"DATADIR":"/tmp/x"`, `"DATADIR"`,
			func(c *NetConf) bool { return c.DataDir == DefaultDataDir }},
		{"Mode", `,"Mode":"exclusive"`, `"Mode"`,
			func(c *NetConf) bool { return c.Mode == ModeAuto }},
		{"IPAM", `,"IPAM":{"type":"host-local"}`, `"IPAM"`,
			func(c *NetConf) bool { return !c.HasIPAM() && c.RawIPAM == nil }},
		{"PrevResult", `,"PrevResult":{"interfaces":[null]}`, `"PrevResult"`,
			func(c *NetConf) bool { return c.PrevResult == nil }},
		{"CNIVersion", `,"CNIVersion":"0.4.0"`, `"CNIVersion"`,
			func(c *NetConf) bool { return c.CNIVersion == "1.0.0" }},
		{"sharedLink.Type", `,"sharedLink":{"Type":"macvlan"}`, `"sharedLink.Type"`,
			func(c *NetConf) bool { return c.SharedLink.Type == LinkIPVlan }},
		{"smcr.PnetId", `,"smcr":{"PnetId":"X"}`, `"smcr.PnetId"`,
			func(c *NetConf) bool { return c.SMCR.PnetID == "" }},
		{"runtimeConfig.DeviceID", `,"runtimeConfig":{"DeviceID":"mlx5_0"}`, `"runtimeConfig.DeviceID"`,
			func(c *NetConf) bool { return c.RequestedDeviceID() == "" }},
		{"ipam.TYPE beside type", `,"ipam":{"type":"host-local","TYPE":"evil"}`, `"ipam.TYPE"`,
			func(c *NetConf) bool { return c.IPAM.Type == "host-local" }},
		{"prevResult.IPs", `,"prevResult":{"IPs":[null]}`, `"prevResult.IPs"`,
			func(c *NetConf) bool { r, err := c.Result(); return err == nil && len(r.IPs) == 0 }},
		{"prevResult.ips[0].Interface", `,"prevResult":{"ips":[{"address":"10.0.0.2/24","Interface":7}]}`,
			`"prevResult.ips[0].Interface"`,
			func(c *NetConf) bool { r, err := c.Result(); return err == nil && r.IPs[0].Interface == nil }},
		{"prevResult.interfaces[0].Name", `,"prevResult":{"interfaces":[{"Name":"eth0"}]}`,
			`"prevResult.interfaces[0].Name"`,
			func(c *NetConf) bool { r, err := c.Result(); return err == nil && r.Interfaces[0].Name == "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf, warnings, err := Parse([]byte(confAt("1.0.0", tc.extra)))
			if err != nil {
				t.Fatalf("a case-variant key must not fail: %v", err)
			}
			if !tc.unused(conf) {
				t.Errorf("the ignored key %s was used: %+v", tc.warned, conf)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], tc.warned) || !strings.Contains(warnings[0], "case-sensitive") {
				t.Errorf("warnings = %q, want one naming %s", warnings, tc.warned)
			}
		})
	}
}

// TestIPAMStdinDropsIgnoredKeys checks that the delegated IPAM never sees
// a key Parse ignored, so its own case-insensitive decoder cannot use it.
func TestIPAMStdinDropsIgnoredKeys(t *testing.T) {
	conf, _, err := Parse([]byte(confAt("1.0.0", `,"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00::/64"}]]},"IPAM":{"type":"host-local","dataDir":"/etc"},"zeta":1`)))
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := conf.IPAMStdin()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["IPAM"]; ok || got["zeta"] != nil || !strings.Contains(string(got["ipam"]), "fd00::/64") || string(got["name"]) != `"net"` {
		t.Errorf("IPAMStdin = %s", stdin)
	}
}

func TestWarningsBounded(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(`,"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `":1`)
	}
	_, warnings, err := Parse([]byte(confAt("1.0.0", b.String())))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != maxWarnings+1 || !strings.Contains(warnings[maxWarnings], "more ignored keys") {
		t.Errorf("%d warnings, last %q", len(warnings), warnings[len(warnings)-1])
	}
}

func TestSMCRAnnotationValues(t *testing.T) {
	cases := []struct {
		value   string
		want    bool
		warning bool
	}{
		{"true", true, false},
		{"TRUE", true, false},
		{"tRuE", true, false},
		{"false", false, false},
		{"False", false, false},
		{"true ", false, true},
		{" true", false, true},
		{"1", false, true},
		{"yes", false, true},
		{"", false, true},
		{"\uff54rue", false, true},  // fullwidth t
		{"tru\u0435", false, true},  // Cyrillic e
		{"fal\u017fe", false, true}, // long s, folds to s in Unicode
		{"true\x00", false, true},
		{"\xff\xfe", false, true},
		{strings.Repeat("x", 5000), false, true},
	}
	for _, tc := range cases {
		conf, _, err := Parse([]byte(confAt("1.0.0", `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"`+
			AnnotationSMCR+`":`+jsonString(tc.value)+`}}`)))
		if err != nil {
			t.Fatalf("value %.20q: %v", tc.value, err)
		}
		got, warning := conf.SMCRRequested()
		if got != tc.want || (warning != "") != tc.warning || len(warning) > 200 {
			t.Errorf("value %.20q: got %v warning %q", tc.value, got, warning)
		}
	}
}

// TestSMCRAnnotationKeyExact checks that only the exact annotation key
// counts.
func TestSMCRAnnotationKeyExact(t *testing.T) {
	conf, _, err := Parse([]byte(confAt("1.0.0", `,"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"Network.AlibabaCloud.com/ERDMA-SMCR":"true"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if on, w := conf.SMCRRequested(); on || w != "" {
		t.Errorf("case-variant annotation key used: %v %q", on, w)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestSMCRFor checks that smcr.enabled and smcr.namespaces decide whether
// an annotated pod gets SMC-R; one the conflist does not allow is a
// warning.
func TestSMCRFor(t *testing.T) {
	for _, tc := range []struct {
		name, smcr, value, namespace string
		want                         bool
		warning                      string
	}{
		{"default: every namespace", ``, "true", "team-a", true, ""},
		{"enabled true", `"enabled":true`, "true", "team-a", true, ""},
		{"enabled false", `"enabled":false`, "true", "team-a", false, "smcr.enabled is false"},
		{"enabled false, not asked", `"enabled":false`, "false", "team-a", false, ""},
		{"namespace listed", `"namespaces":["team-a","team-b"]`, "true", "team-b", true, ""},
		{"namespace not listed", `"namespaces":["team-a"]`, "true", "kube-system", false, `namespace "kube-system" is not in smcr.namespaces`},
		{"no namespace in CNI_ARGS", `"namespaces":["team-a"]`, "true", "", false, `namespace "" is not in`},
		{"listed but off", `"enabled":false,"namespaces":["team-a"]`, "true", "team-a", false, "smcr.enabled is false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, _, err := Parse([]byte(confAt("1.0.0", `,"smcr":{`+tc.smcr+`},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"`+
				AnnotationSMCR+`":"`+tc.value+`"}}`)))
			if err != nil {
				t.Fatal(err)
			}
			got, warning := conf.SMCRFor(tc.namespace)
			if got != tc.want || (tc.warning == "") != (warning == "") || !strings.Contains(warning, tc.warning) {
				t.Errorf("got %v %q, want %v %q", got, warning, tc.want, tc.warning)
			}
		})
	}
}

// hostLocalRange has the range keys of host-local's ipam section.
type hostLocalRange struct {
	Subnet     string
	Ranges     any
	Range      any
	RangeStart string
	RangeEnd   string
}

// TestIPAMRangeKeysAsHostLocalReadsThem checks that podIPv6Block refuses
// each of these keys: host-local decodes its ipam section with
// encoding/json, whose key matching is case-insensitive with Unicode
// folding, so each sets its range or subnet.
func TestIPAMRangeKeysAsHostLocalReadsThem(t *testing.T) {
	for _, key := range []string{"subnet", "Subnet", "SUBNET", "\u017fubnet", "Ranges", "RANGE", "rangestart", "RangeEnd"} {
		var hostLocal hostLocalRange
		if err := json.Unmarshal([]byte(`{`+jsonString(key)+`:"x"}`), &hostLocal); err != nil && !strings.Contains(err.Error(), "cannot unmarshal") {
			t.Fatal(err)
		}
		if hostLocal == (hostLocalRange{}) {
			t.Errorf("encoding/json does not read %q as a range key: the rule is stricter than it needs to be", key)
		}
		_, _, err := Parse([]byte(confAt("1.0.0", `,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local",`+jsonString(key)+`:"x"}`)))
		if err == nil || !strings.Contains(err.Error(), "must not be set with podIPv6Block") {
			t.Errorf("ipam key %q with podIPv6Block: %v", key, err)
		}
	}
}
