package testenv

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// gateProbeEnv makes the test binary, run again by TestPrivilegedGate, a
// privileged case and nothing else.
const gateProbeEnv = "RC_TESTENV_GATE_PROBE"

func TestPrivilegedGateProbe(t *testing.T) {
	if os.Getenv(gateProbeEnv) != "1" {
		t.Skip("run by TestPrivilegedGate")
	}
	Privileged(t)
	t.Log("privileged case ran")
}

// TestPrivilegedGate checks that a privileged case skips without
// RC_PRIVILEGED=1 and fails, never skips, with it in a process that is
// not root.
func TestPrivilegedGate(t *testing.T) {
	bin := copyTestBinary(t)
	tests := []struct {
		name       string
		privileged bool
		failed     bool
		out        string
	}{
		{"tier not selected", false, false, "SKIP: TestPrivilegedGateProbe"},
		{"tier selected, not root", true, true, "the privileged tier needs root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^TestPrivilegedGateProbe$", "-test.v")
			cmd.Env = []string{gateProbeEnv + "=1", "PATH=" + os.Getenv("PATH")}
			if tt.privileged {
				cmd.Env = append(cmd.Env, PrivilegedEnv+"=1")
			}
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tt.failed || !strings.Contains(string(out), tt.out) {
				t.Errorf("err %v, want failed=%v and %q in:\n%s", err, tt.failed, tt.out, out)
			}
		})
	}
}

// copyTestBinary copies this test binary where another user may run it.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "testenv.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestEffectiveCaps(t *testing.T) {
	if _, err := effectiveCaps(); err != nil {
		t.Fatal(err)
	}
}
