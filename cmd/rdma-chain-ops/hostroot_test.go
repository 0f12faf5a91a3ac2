package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// opsArgsEnv, set, makes the test binary run Main with its unit-separator (0x1f) separated
// arguments instead of the tests: --host-root chroots the whole process,
// so it runs in a process of its own.
const opsArgsEnv = "RC_OPS_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(opsArgsEnv); args != "" {
		os.Exit(Main(strings.Split(args, "\x1f"), "test", IO{Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	leakcheck.Main(m)
}

// runProcess runs Main in a new process of the test binary.
func runProcess(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), opsArgsEnv+"="+strings.Join(args, "\x1f"))
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestUninstallHostRoot checks that uninstall in a debug pod sees the node
// at --host-root. Every path it uses is then the node's: the entry's
// dataDir (the default, /var/lib/cni/rdma-chain) holds a recorded
// attachment there, which keeps the entry, draining, and the binaries; once
// the record is gone, the entry and the binaries go, from the node's tree
// only.
func TestUninstallHostRoot(t *testing.T) {
	testenv.Privileged(t)
	root := t.TempDir()
	confDir := filepath.Join(root, "etc/cni/net.d")
	binDir := filepath.Join(root, "opt/cni/bin")
	stateDir := filepath.Join(root, config.DefaultDataDir)
	for _, d := range []string{confDir, binDir, stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	primary := filepath.Join(confDir, "10-podnet.conflist")
	orig := `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"ptp"}]}`
	withEntry := `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"shared"}]}`
	if err := os.WriteFile(primary, []byte(withEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{conflist.PluginType, hookcmd.Binary} {
		if err := os.WriteFile(filepath.Join(binDir, name), []byte(name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec := &state.Record{Network: "podnet", ContainerID: "c1", IfName: "eth0"}
	if err := state.New(stateDir).Put(rec); err != nil {
		t.Fatal(err)
	}
	args := []string{"uninstall", "--host-root", root, "--conflist", "auto", "--cni-bin-dir", "/opt/cni/bin"}
	code, out := runProcess(t, args...)
	if code != ExitProblems || !strings.Contains(out, config.DefaultDataDir+": held by podnet/c1/eth0") {
		t.Fatalf("uninstall with the node's record: exit %d\n%s", code, out)
	}
	if data, _ := os.ReadFile(primary); !strings.Contains(string(data), `"drain": true`) {
		t.Errorf("entry not draining:\n%s", data)
	}
	if _, err := os.Stat(filepath.Join(binDir, conflist.PluginType)); err != nil {
		t.Errorf("plugin binary gone while an attachment is recorded: %v", err)
	}
	if err := state.New(stateDir).Delete(rec.Key()); err != nil {
		t.Fatal(err)
	}
	code, out = runProcess(t, args...)
	if code != ExitOK || !strings.Contains(out, "/etc/cni/net.d/10-podnet.conflist: rdma-chain entry removed") ||
		!strings.Contains(out, "/opt/cni/bin/rdma-chain: removed") {
		t.Fatalf("uninstall once nothing is recorded: exit %d\n%s", code, out)
	}
	if data, _ := os.ReadFile(primary); !sameJSON(t, data, []byte(orig)) {
		t.Errorf("conflist after uninstall:\n%s\nwant\n%s", data, orig)
	}
	for _, name := range []string{conflist.PluginType, hookcmd.Binary} {
		if _, err := os.Lstat(filepath.Join(binDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", name, err)
		}
	}
	if code, out := runProcess(t, "uninstall", "--host-root", "relative/root", "--conflist", "auto"); code != ExitProblems ||
		!strings.Contains(out, "not an absolute path") {
		t.Errorf("relative --host-root: exit %d\n%s", code, out)
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}
