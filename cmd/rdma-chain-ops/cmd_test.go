package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/state"
	"github.com/rdma-chain/rdma-chain/pkg/validate"
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

// newBinTree is an image root (src) holding the plugin binaries and an
// empty host CNI bin dir (dst).
func newBinTree(t *testing.T) (src, dst string) {
	t.Helper()
	src, dst = filepath.Join(t.TempDir(), "image"), filepath.Join(t.TempDir(), "bin")
	for _, d := range []string{src, dst} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{conflist.PluginType, hookcmd.Binary} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(name+" v1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return src, dst
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
	if probs := validate.Conflist(data, ""); len(probs) != 0 {
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

// TestInstallCommandBinaries runs the init container's one command,
// binaries then the conflist, waiting for the conflist the primary
// plugin writes.
func TestInstallCommandBinaries(t *testing.T) {
	src, dst := newBinTree(t)
	list := filepath.Join(t.TempDir(), "10-rdmanet.conflist")
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(list+".tmp", []byte(`{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"}]}`), 0o644)
		_ = os.Rename(list+".tmp", list)
	}()
	args := []string{"install", "--binaries-from", src, "--cni-bin-dir", dst, "--conflist", list, "--wait", "10s", "--set", `{"mode":"auto"}`}
	code, out, errOut := run(args...)
	want := dst + "/" + hookcmd.Binary + ": installed\n" + dst + "/" + conflist.PluginType + ": installed\n" + list + ": rdma-chain entry inserted\n"
	if code != ExitOK || out != want {
		t.Fatalf("code %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	code, out, _ = run(args...)
	if code != ExitOK || strings.Count(out, "unchanged") != 3 {
		t.Errorf("second run: %d %q", code, out)
	}

	tests := []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"binaries only (behind Terway)", []string{"--binaries-from", src, "--cni-bin-dir", dst}, ExitOK, ""},
		{"bin dir without source", []string{"--cni-bin-dir", dst, "--conflist", list}, ExitUsage, "go together"},
		{"nothing to do", nil, ExitUsage, "--conflist or --binaries-from is required"},
		{"conflist never appears", []string{"--conflist", list + ".none", "--wait", "1500ms"}, ExitProblems, "after 1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(append([]string{"install"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("code %d, want %d; stderr %q, want %q", code, tt.code, errOut, tt.wantErr)
			}
		})
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.conflist"), filepath.Join(dir, "bad.conflist")
	if err := os.WriteFile(good, []byte(goodList), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(goodList, `"mode"`, `"Mode"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run("validate", good); code != ExitOK || out != "" {
		t.Errorf("good: code %d, %q", code, out)
	}
	code, out, _ := run("validate", good, bad, filepath.Join(dir, "missing"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitProblems || len(lines) != 2 || !strings.HasPrefix(lines[0], bad+`:6:28: unknown key "Mode"`) ||
		!strings.Contains(lines[1], "missing: open") {
		t.Errorf("code %d, output:\n%s", code, out)
	}
}

func TestInspectCommandDataDirFromConflist(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	list := filepath.Join(dir, "10.conflist")
	data := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","dataDir":"` + state + `"}]}`
	if err := os.WriteFile(list, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := outcome.Record(state, outcome.Entry{Verb: "ADD", Pod: "ns/p", Code: 7, Msg: "bad"}); err != nil {
		t.Fatal(err)
	}
	// The kernel parts differ between machines; the failure comes from the
	// conflist's state directory.
	_, out, _ := run("inspect", "--conflist", list)
	if !strings.Contains(out, "  ns/p  ADD  code 7  at ") {
		t.Errorf("output:\n%s", out)
	}
	if code, _, errOut := run("inspect", "--conflist", filepath.Join(dir, "none")); code != ExitProblems || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing conflist: %d %q", code, errOut)
	}
}

func TestReconcileCommandNetns(t *testing.T) {
	// The command end to end over the real plugin DEL, with a record whose
	// netns path never existed: a pass-through-like record with no links.
	dir := t.TempDir()
	r := &state.Record{Network: "n1", ContainerID: "c1", IfName: "eth0", NetNS: filepath.Join(dir, "no-such-netns")}
	if err := state.New(dir).Put(r); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("reconcile", "--net-name", "n1", "--data-dir", dir, "--once")
	if code != ExitOK || !strings.Contains(out, `msg="released an attachment" attachment="n1/c1/eth0 (pod unknown, pass-through)"`) {
		t.Fatalf("code %d\n%s%s", code, out, errOut)
	}
	if recs, err := state.New(dir).List(); err != nil || len(recs) != 0 {
		t.Errorf("records left: %v %v", recs, err)
	}
}

// TestInstallAutoAndUninstall checks that install --conflist auto finds
// the primary's conflist as runtimes do; uninstall drains the entry and
// keeps it and the binaries while an attachment is recorded, unless
// --force.
func TestInstallAutoAndUninstall(t *testing.T) {
	src, bin := newBinTree(t)
	conf := t.TempDir()
	stateDir := filepath.Join(t.TempDir(), "state")
	primary := filepath.Join(conf, "10-calico.conflist")
	orig := `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap"}]}`
	if err := os.WriteFile(primary, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "20-later.conflist"), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("install", "--binaries-from", src, "--cni-bin-dir", bin, "--cni-conf-dir", conf, "--conflist", "auto",
		"--after", "calico", "--set", `{"dataDir":"`+stateDir+`"}`)
	if code != ExitOK || !strings.Contains(out, primary+": rdma-chain entry inserted") {
		t.Fatalf("install: %d %q %q", code, out, errOut)
	}
	if err := outcome.Record(stateDir, outcome.Entry{Verb: "ADD", Pod: "ns/p"}); err != nil {
		t.Fatal(err)
	}
	rec := &state.Record{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"}
	if err := state.New(stateDir).Put(rec); err != nil {
		t.Fatal(err)
	}
	// A recorded attachment whose pod cannot be told gone keeps the entry,
	// draining, and the binaries.
	code, out, errOut = run("uninstall", "--cni-conf-dir", conf, "--conflist", "auto", "--cni-bin-dir", bin)
	if code != ExitProblems || !strings.Contains(out, primary+": rdma-chain entry draining: new pods pass through\n") ||
		!strings.Contains(out, stateDir+": held by k8s-pod-network/c1/eth0") || !strings.Contains(errOut, "attachments of running pods are still recorded: 1 in "+stateDir) {
		t.Fatalf("uninstall with a live attachment: %d\n%s%s", code, out, errOut)
	}
	if data, _ := os.ReadFile(primary); !strings.Contains(string(data), `"drain": true`) {
		t.Errorf("conflist not draining:\n%s", data)
	}
	for _, b := range []string{conflist.PluginType, hookcmd.Binary} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Errorf("binary %s removed while an attachment is recorded: %v", b, err)
		}
	}
	code, out, errOut = run("uninstall", "--cni-conf-dir", conf, "--conflist", "auto", "--cni-bin-dir", bin, "--force")
	wantTail := primary + ": rdma-chain entry removed\n" + stateDir + ": --force: 1 attachments of running pods left recorded; nothing will give them back\n" +
		bin + "/" + conflist.PluginType + ": removed\n" + bin + "/" + hookcmd.Binary + ": removed\n"
	if code != ExitOK || !strings.Contains(out, primary+": rdma-chain entry already draining\n") || !strings.HasSuffix(out, wantTail) {
		t.Fatalf("uninstall --force: %d\n%s\nwant ending\n%s%s", code, out, wantTail, errOut)
	}
	if data, _ := os.ReadFile(primary); string(data) != orig {
		t.Errorf("conflist after uninstall:\n%s\nwant\n%s", data, orig)
	}
	if recs, err := state.New(stateDir).List(); err != nil || len(recs) != 1 {
		t.Errorf("records after uninstall: %v %v", recs, err)
	}
	if code, out, _ := run("uninstall", "--cni-conf-dir", conf, "--conflist", "auto", "--cni-bin-dir", bin); code != ExitOK ||
		!strings.Contains(out, "no rdma-chain entry") || !strings.Contains(out, "not there") {
		t.Errorf("second uninstall: %d %q", code, out)
	}
	empty := t.TempDir()
	if code, _, errOut := run("install", "--cni-conf-dir", empty, "--conflist", "auto", "--wait", "1100ms"); code != ExitProblems || !strings.Contains(errOut, "no conflist in "+empty) {
		t.Errorf("no conflist at all: %d %q", code, errOut)
	}
	if code, _, errOut := run("uninstall"); code != ExitUsage || !strings.Contains(errOut, "is required") {
		t.Errorf("uninstall without arguments: %d %q", code, errOut)
	}
	if code, _, errOut := run("uninstall", "--cni-bin-dir", bin, "--force"); code != ExitUsage || !strings.Contains(errOut, "go with --conflist") {
		t.Errorf("uninstall --force without --conflist: %d %q", code, errOut)
	}
}

// TestUninstallUnreadableEntry checks that an entry the plugin cannot
// read drains nothing: uninstall refuses it, --force takes it out.
func TestUninstallUnreadableEntry(t *testing.T) {
	conf := t.TempDir()
	primary := filepath.Join(conf, "10-ptp.conflist")
	orig := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"}]}`
	bad := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"both"}]}`
	if err := os.WriteFile(primary, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run("uninstall", "--cni-conf-dir", conf, "--conflist", "auto"); code != ExitProblems || !strings.Contains(errOut, `field "mode"`) {
		t.Fatalf("uninstall of an unreadable entry: %d %q %q", code, out, errOut)
	}
	if data, _ := os.ReadFile(primary); string(data) != bad {
		t.Errorf("refused uninstall changed the conflist:\n%s", data)
	}
	if code, out, errOut := run("uninstall", "--cni-conf-dir", conf, "--conflist", "auto", "--force"); code != ExitOK || !strings.Contains(out, "rdma-chain entry removed") {
		t.Fatalf("uninstall --force: %d %q %q", code, out, errOut)
	}
	if data, _ := os.ReadFile(primary); string(data) != orig {
		t.Errorf("conflist after uninstall --force:\n%s\nwant\n%s", data, orig)
	}
}
