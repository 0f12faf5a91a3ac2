package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodList = `{
  "cniVersion": "1.0.0",
  "name": "rdmanet",
  "plugins": [
    {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/16"}]]}},
    {"type": "rdma-chain", "mode": "shared", "smcr": {"onUnsupported": "warn"},
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "fd00:77::/64"}]]},
     "capabilities": {"io.kubernetes.cri.pod-annotations": true}}
  ]
}`

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string // one line per problem, "line:col: message" prefixes
	}{
		{"good", goodList, nil},
		{"syntax", "{\"cniVersion\": \"1.0.0\",\n \"plugins\": [ {\"type\": \"ptp\",}]}",
			[]string{`2:30: invalid JSON: invalid character '}' looking for beginning of object key string`}},
		{"truncated", `{"plugins": [`, []string{`1:13: invalid JSON: unexpected end of JSON input`}},
		{"not a conflist", `{"cniVersion":"1.0.0","name":"n","type":"rdma-chain"}`,
			[]string{"1:1: rdma-chain is a chained plugin"}},
		{"no entry", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"}]}`,
			[]string{`1:34: no plugin of type rdma-chain in plugins`}},
		{"wrong case type", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"RDMA-chain"}]}`,
			[]string{`1:34: no plugin of type rdma-chain in plugins`, `1:61: plugins[1] type "RDMA-chain": plugin types are case-sensitive, did you mean "rdma-chain"?`}},
		{"unsupported version and no name", `{"cniVersion":"1.2.0","plugins":[{"type":"ptp"},{"type":"rdma-chain"}]}`,
			[]string{"1:1: the conflist needs a non-empty string name", `1:2: cniVersion "1.2.0" is not supported`}},
		{"cniVersions", `{"cniVersion":"1.0.0","cniVersions":["1.0.0","2.0.0"],"name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain"}]}`,
			[]string{`1:46: cniVersions: "2.0.0" is not supported`}},
		{"first plugin", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"rdma-chain"},{"type":"ptp"}]}`,
			[]string{`1:45: rdma-chain must come after the plugin that creates the pod interface (it is the first plugin)`}},
		{"after chained-only", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"tuning"},{"type":"rdma-chain"}]}`,
			[]string{`(before it: tuning)`}},
		{"two entries", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain"},{"type":"rdma-chain"}]}`,
			[]string{`1:82: a second rdma-chain entry`}},
		{"unknown keys with suggestions", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},
 {"type":"rdma-chain","Mode":"shared","devcies":["eth1"],"sharedLink":{"typ":"none"},"zzzzzzzzzz":1}]}`,
			[]string{`2:23: unknown key "Mode": did you mean "mode"?`, `2:39: unknown key "devcies": did you mean "devices"?`,
				`2:72: unknown key "sharedLink.typ": did you mean "sharedLink.type"?`, `2:86: unknown key "zzzzzzzzzz"`}},
		{"runtime keys and duplicates", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"auto","mode":"shared","prevResult":{}}]}`,
			[]string{`1:95: key "mode" appears twice`, `1:111: key "prevResult" is set by the runtime`}},
		{"capability missing for smcr", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","smcr":{}}]}`,
			[]string{`1:81: smcr is set but capabilities does not declare "io.kubernetes.cri.pod-annotations"`}},
		{"unknown capability", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","capabilities":{"io.kubernetes.cri.pod-annotation":true}}]}`,
			[]string{`unknown key "capabilities.io.kubernetes.cri.pod-annotation": did you mean "capabilities.io.kubernetes.cri.pod-annotations"?`}},
		{"kubeletUnreachable known", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","kubeletUnreachable":"passThrough"}]}`, nil},
		{"kubeletUnreachable misspelt", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","kubeletUnreachble":"retry"}]}`,
			[]string{`unknown key "kubeletUnreachble": did you mean "kubeletUnreachable"?`}},
		{"kubeletUnreachable bad value", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","kubeletUnreachable":"fail"}]}`,
			[]string{`field "kubeletUnreachable": must be retry or passThrough, got "fail"`}},
		{"every bad value", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},
  {"type":"rdma-chain","mode":"both","ifName":"waytoolongname","smcr":{"pnetId":"bad-id"},"dataDir":"relative"}]}`,
			[]string{`2:24: invalid network configuration: field "mode": must be auto, exclusive or shared, got "both"`,
				`2:38: invalid network configuration: field "ifName"`, `2:64: smcr is set but capabilities does not declare`,
				`2:72: invalid network configuration: field "smcr.pnetId"`, `2:91: invalid network configuration: field "dataDir"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probs := Conflist([]byte(tt.data), "")
			var got []string
			all := FormatAll("f", []byte(tt.data), probs)
			for i, p := range probs {
				got = append(got, strings.TrimPrefix(p.Format("f", []byte(tt.data)), "f:"))
				if all[i] != "f:"+got[i] && all[i] != "f: "+strings.TrimPrefix(got[i], " ") {
					t.Errorf("FormatAll %q, Format %q", all[i], got[i])
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d:\n got %s\nwant %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestValidateIPAMBinary(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "host-local"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "static"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	list := func(ipam string) string {
		return `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","ipam":{"type":"` + ipam + `"}}]}`
	}
	tests := []struct{ ipam, want string }{
		{"host-local", ""},
		{"dhcp", `ipam.type "dhcp": no such plugin in ` + bin},
		{"static", "is not an executable file"},
		{"../host-local", `field "ipam.type": "../host-local" must be a plugin name`},
	}
	for _, tt := range tests {
		probs := Conflist([]byte(list(tt.ipam)), bin)
		switch {
		case tt.want == "" && len(probs) != 0:
			t.Errorf("%s: %v", tt.ipam, probs)
		case tt.want != "" && (len(probs) != 1 || !strings.Contains(probs[0].Msg, tt.want)):
			t.Errorf("%s: got %v, want %q", tt.ipam, probs, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	known := entryKeys().keys
	for k, want := range map[string]string{"datadir": "dataDir", "podselection": "podSelection", "smrc": "smcr", "resourceName": "resourceNames", "qqqqqqqq": ""} {
		if got := closest(k, sortedNames(known)); got != want {
			t.Errorf("closest(%q) = %q, want %q", k, got, want)
		}
	}
}
