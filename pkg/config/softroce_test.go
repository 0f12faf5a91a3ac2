package config

import "testing"

func TestSoftRoCEDefaults(t *testing.T) {
	cases := []struct {
		name, extra        string
		wantType, wantMode string
	}{
		{"no soft-RoCE", ``, LinkIPVlan, "l2"},
		{"soft-RoCE: macvlan bridge", `,"podSoftRoCE":"eth1"`, LinkMACVlan, "bridge"},
		{"soft-RoCE with macvlan given", `,"podSoftRoCE":"eth1","sharedLink":{"type":"macvlan"}`, LinkMACVlan, "bridge"},
		{"soft-RoCE in shared mode", `,"podSoftRoCE":"ens5f0","mode":"shared"`, LinkMACVlan, "bridge"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf, warnings, err := parse(t, tc.extra)
			if err != nil || len(warnings) != 0 {
				t.Fatalf("Parse: %v %v", err, warnings)
			}
			if conf.SharedLink.Type != tc.wantType || conf.SharedLink.Mode != tc.wantMode {
				t.Errorf("sharedLink %+v, want %s %s", conf.SharedLink, tc.wantType, tc.wantMode)
			}
		})
	}
}
