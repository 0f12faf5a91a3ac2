package conflist

import (
	"strings"
	"testing"
)

const terwayList = `{
  "cniVersion": "0.4.0",
  "name": "terway-chainer",
  "plugins": [
    {"type": "terway", "eniip_virtual_type": "IPVlan",   "odd":   "spacing"},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

func TestInstallEntry(t *testing.T) {
	withEntry := strings.Replace(terwayList, `"spacing"},`, `"spacing"},
    {"type": "rdma-chain", "mode": "shared"},`, 1)
	tests := []struct {
		name, data, after, set string
		want                   string // "" means unchanged
		what                   string
	}{
		{"append", terwayList, "", `{"sharedLink":{"type":"none"}}`, `{"type": "terway", "eniip_virtual_type": "IPVlan",   "odd":   "spacing"},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "rdma-chain", "sharedLink": {"type":"none"}, "capabilities": {"io.kubernetes.cri.pod-annotations": true}}
  ]`, "rdma-chain entry inserted"},
		{"after terway", terwayList, "terway", "", `"spacing"},
    {"type": "rdma-chain", "capabilities": {"io.kubernetes.cri.pod-annotations": true}},
    {"type": "portmap"`, "rdma-chain entry inserted"},
		{"update in place", withEntry, "", `{"mode":"exclusive","ifName":"erdma"}`,
			`{"type": "rdma-chain", "mode": "exclusive", "ifName": "erdma"},`, "rdma-chain entry updated"},
		{"remove a key", withEntry, "", `{"mode":null}`, `{"type": "rdma-chain"},`, "rdma-chain entry updated"},
		{"same values", withEntry, "terway", `{"mode": "shared"}`, "", ""},
		{"move after portmap", withEntry, "portmap", "", `{"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "rdma-chain", "mode": "shared"}
  ]`, "rdma-chain entry moved after portmap"},
		{"empty plugins", `{"cniVersion":"1.0.0","name":"n","plugins":[]}`, "", "", `"plugins":[{"type": "rdma-chain", "capabilities": {"io.kubernetes.cri.pod-annotations": true}}]`, "rdma-chain entry inserted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, what, err := Upsert([]byte(tt.data), tt.after, []byte(tt.set))
			if err != nil {
				t.Fatal(err)
			}
			if what != tt.what {
				t.Errorf("what = %q, want %q", what, tt.what)
			}
			if tt.want == "" {
				if string(out) != tt.data {
					t.Errorf("changed:\n%s", out)
				}
				return
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("result:\n%s\nwant it to contain:\n%s", out, tt.want)
			}
			// Idempotent: the same install again changes nothing.
			again, what2, err := Upsert(out, tt.after, []byte(tt.set))
			if err != nil || what2 != "" || string(again) != string(out) {
				t.Errorf("second install: %q %v\n%s", what2, err, again)
			}
		})
	}
}

func TestInstallEntryErrors(t *testing.T) {
	tests := []struct{ name, data, after, set, want string }{
		{"not JSON", `{`, "", "", "not valid JSON"},
		{"no plugins", `{"cniVersion":"1.0.0","name":"n","type":"ptp"}`, "", "", "no plugins array"},
		{"no such after", terwayList, "bridge", "", `no plugin of type "bridge"`},
		{"set not object", terwayList, "", `["x"]`, "--set must be a JSON object"},
		{"set type", terwayList, "", `{"type":"ptp"}`, `cannot change "type"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Upsert([]byte(tt.data), tt.after, []byte(tt.set))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}
