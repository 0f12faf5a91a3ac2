package ops

import (
	"os"
	"path/filepath"
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
			out, what, err := installEntry([]byte(tt.data), tt.after, []byte(tt.set))
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
			again, what2, err := installEntry(out, tt.after, []byte(tt.set))
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
			_, _, err := installEntry([]byte(tt.data), tt.after, []byte(tt.set))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func TestInstallCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-terway.conflist")
	if err := os.WriteFile(path, []byte(terwayList), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("install", "--conflist", path, "--after", "terway", "--set", `{"sharedLink":{"type":"none"}}`)
	if code != ExitOK || out != path+": rdma-chain entry inserted\n" {
		t.Fatalf("code %d, %q %q", code, out, errOut)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("mode after install: %v %v", st.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	if probs := validateConflist(data, ""); len(probs) != 0 {
		t.Errorf("installed conflist has problems: %v", probs)
	}
	if code, out, _ := run("install", "--conflist", path, "--after", "terway", "--set", `{"sharedLink":{"type":"none"}}`); code != ExitOK || !strings.HasSuffix(out, ": unchanged\n") {
		t.Errorf("second install: %d %q", code, out)
	}
	if code, out, _ := run("install", "--conflist", path, "--set", `{"mode":"exclusive"}`, "--dry-run"); code != ExitOK || !strings.Contains(out, `"mode": "exclusive"`) {
		t.Errorf("dry-run: %d %q", code, out)
	}
	if after, _ := os.ReadFile(path); string(after) != string(data) {
		t.Error("--dry-run wrote the file")
	}
	// A result the plugin would refuse is not written.
	code, _, errOut = run("install", "--conflist", path, "--set", `{"mode":"both"}`)
	if after, _ := os.ReadFile(path); code != ExitProblems || string(after) != string(data) || !strings.Contains(errOut, `field "mode"`) {
		t.Errorf("invalid --set: code %d, %q", code, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".rdma-chain-install-*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

func TestInstallRefusesSymlinkAndMissing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.conflist")
	if err := os.WriteFile(target, []byte(terwayList), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "10-link.conflist")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run("install", "--conflist", link)
	if code != ExitProblems || !strings.Contains(errOut, "it is a symlink") {
		t.Errorf("symlink: %d %q", code, errOut)
	}
	if data, _ := os.ReadFile(target); string(data) != terwayList {
		t.Error("symlink target changed")
	}
	if code, _, errOut := run("install", "--conflist", filepath.Join(dir, "none.conflist")); code != ExitProblems || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing: %d %q", code, errOut)
	}
}
