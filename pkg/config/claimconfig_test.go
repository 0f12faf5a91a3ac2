package config

import (
	"strings"
	"testing"
)

func TestParseClaimConfig(t *testing.T) {
	head := `"apiVersion": "rdma-chain.github.io/v1alpha1", "kind": "RDMAConfig"`
	on, off := true, false
	tests := []struct {
		name, in string
		want     ClaimConfig
		err      string // a substring of the error; "" for none
	}{
		{name: "empty", in: `{` + head + `}`},
		{name: "every field", in: `{` + head + `, "smcr": false, "ipv6": true, "ifName": "roce0", "sharedLink": "macvlan"}`,
			want: ClaimConfig{SMCR: &off, IPv6: &on, IfName: "roce0", SharedLink: "macvlan"}},
		{name: "no kind", in: `{"apiVersion": "rdma-chain.github.io/v1alpha1"}`, err: `field "kind": missing`},
		{name: "no apiVersion", in: `{"kind": "RDMAConfig"}`, err: `field "apiVersion": missing`},
		{name: "other version", in: `{"apiVersion": "rdma-chain.github.io/v1", "kind": "RDMAConfig"}`, err: `field "apiVersion": "rdma-chain.github.io/v1", want`},
		{name: "other kind", in: `{"apiVersion": "rdma-chain.github.io/v1alpha1", "kind": "Foo"}`, err: `field "kind"`},
		{name: "unknown field", in: `{` + head + `, "smc": true}`, err: `field "smc": unknown field`},
		{name: "keys are case-sensitive", in: `{` + head + `, "IfName": "x"}`, err: `field "IfName": unknown field`},
		{name: "bool as string", in: `{` + head + `, "ipv6": "true"}`, err: `field "ipv6"`},
		{name: "bad ifName", in: `{` + head + `, "ifName": "a/b"}`, err: `field "ifName"`},
		{name: "ifName the kernel would number", in: `{` + head + `, "ifName": "x%d"}`, err: `field "ifName"`},
		{name: "ifName not ASCII", in: `{` + head + `, "ifName": "rdmä"}`, err: `field "ifName"`},
		{name: "long ifName", in: `{` + head + `, "ifName": "` + strings.Repeat("a", 16) + `"}`, err: `field "ifName"`},
		{name: "bad sharedLink", in: `{` + head + `, "sharedLink": "vlan"}`, err: `field "sharedLink": "vlan", want one of`},
		{name: "not an object", in: `[1]`, err: "want a JSON object"},
		{name: "null", in: `null`, err: "want a JSON object"},
		{name: "too long", in: `{` + head + `, "ifName": "` + strings.Repeat(" ", 5000) + `"}`, err: "at most 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClaimConfig([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want.String() {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			back, err := ParseClaimConfig([]byte(got.Encode()))
			if err != nil || back.String() != got.String() {
				t.Fatalf("Encode %s reads back as %s, %v", got.Encode(), back, err)
			}
		})
	}
}

func TestClaimConfigOverAndFromClaim(t *testing.T) {
	on, off := true, false
	class := ClaimConfig{SMCR: &on, IfName: "roce0"}
	claim := ClaimConfig{IPv6: &off, IfName: "roce1"}
	if got := class.Over(claim).String(); got != "smcr=true ipv6=false ifName=roce1" {
		t.Fatalf("class over claim: %s", got)
	}
	tests := []struct {
		name string
		c    ClaimConfig
		err  bool
	}{
		{"smcr true", ClaimConfig{SMCR: &on}, true},
		{"smcr false", ClaimConfig{SMCR: &off}, false},
		{"no smcr", ClaimConfig{IfName: "x"}, false},
		{"sharedLink", ClaimConfig{SharedLink: "macvlan"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ClaimConfigFromClaim(tt.c)
			if (err != nil) != tt.err {
				t.Fatalf("ClaimConfigFromClaim(%s) = %v, want error %t", tt.c, err, tt.err)
			}
		})
	}
}
