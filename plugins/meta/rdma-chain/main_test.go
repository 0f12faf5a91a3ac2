package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/config"
)

const testVersion = "v9.8.7-test"

// buildPlugin builds this command as make build does, stamped with
// testVersion.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdma-chain")
	cmd := testenv.GoCmd("build", "-ldflags", "-s -w -X main.buildVersion="+testVersion, "-o", bin, "./plugins/meta/rdma-chain")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBounded runs bin with args, env and stdin; the process must exit by
// itself: one still running after the bound is killed and fails the test.
func runBounded(t *testing.T, bin string, args, env []string, stdin *os.File) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin = stdin // an *os.File: the child holds it, no copying goroutine
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not exit by itself (killed after the bound); output %q", bin, args, out.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// openPipe is a pipe whose write end stays open until the test ends: its
// read end, as stdin, never reaches EOF.
func openPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r
}

// openPTY is the follower side of a new pseudo-terminal, as a shell's stdin
// is; nothing is ever typed into it.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	leader, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Close() })
	if err := unix.IoctlSetPointerInt(int(leader.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(leader.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	follower, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Close() })
	return follower
}

// TestAboutWithoutCNICommand checks that a person running the binary with
// an argument, or on a terminal, gets what it is, its version and the CNI
// versions it serves, exit 0, while stdin stays open and unread.
func TestAboutWithoutCNICommand(t *testing.T) {
	bin := buildPlugin(t)
	env := []string{"PATH=/usr/bin:/bin"} // no CNI_* at all
	for _, tc := range []struct {
		name  string
		args  []string
		stdin func(*testing.T) *os.File
	}{
		{"--help, open pipe", []string{"--help"}, openPipe},
		{"-h, open pipe", []string{"-h"}, openPipe},
		{"--version, open pipe", []string{"--version"}, openPipe},
		{"any argument, open pipe", []string{"add", "eth0"}, openPipe},
		{"--help, terminal", []string{"--help"}, openPTY},
		{"no argument, terminal", nil, openPTY},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runBounded(t, bin, tc.args, env, tc.stdin(t))
			want := []string{"rdma-chain " + testVersion + ":", "CNI protocol versions supported: " + strings.Join(config.SupportedVersions, ", ")}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if code != 0 {
				t.Errorf("exit %d, want 0:\n%s", code, out)
			}
		})
	}
}

// TestRuntimeUnchanged checks that with CNI_COMMAND set the binary serves
// CNI whatever its arguments (it reads stdin to its end), and without
// CNI_COMMAND, no argument and a stdin that ends (no terminal) it answers as
// before: the CNI error 4 for the missing variable.
func TestRuntimeUnchanged(t *testing.T) {
	bin := buildPlugin(t)
	conf := func(t *testing.T) *os.File {
		p := filepath.Join(t.TempDir(), "conf.json")
		if err := os.WriteFile(p, []byte(`{"cniVersion":"1.0.0","name":"n","type":"rdma-chain"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	t.Run("VERSION with an argument", func(t *testing.T) {
		out, code := runBounded(t, bin, []string{"--help"}, []string{"CNI_COMMAND=VERSION"}, conf(t))
		var v struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || !slices.Equal(v.SupportedVersions, config.SupportedVersions) {
			t.Errorf("exit %d, %v: %s", code, err, out)
		}
	})
	t.Run("no CNI_COMMAND, no argument", func(t *testing.T) {
		out, code := runBounded(t, bin, nil, nil, conf(t))
		var e struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil || code == 0 || e.Code != 4 {
			t.Errorf("exit %d, %v: %s", code, err, out)
		}
	})
}

// TestRuntimeGoneDuringCall checks that, when a runtime that died while
// the plugin ran (containerd killed mid-DEL) left the plugin's stdout
// and stderr broken pipes, the plugin still ends its call as it would
// have (a DEL with nothing recorded exits 0, a STATUS without kubelet's
// socket 1) instead of dying of SIGPIPE at its first log line, and its
// log file has the call's closing line. Nothing of the host is touched.
func TestRuntimeGoneDuringCall(t *testing.T) {
	bin := buildPlugin(t)
	for _, tc := range []struct {
		verb, version, closing string
		code                   int
	}{
		{"DEL", "1.0.0", "msg=done", 0},
		{"STATUS", "1.1.0", "msg=failed", 1},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			dir := t.TempDir()
			logFile := filepath.Join(dir, "rdma-chain.log")
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":"n","type":"rdma-chain","podSelection":"requested","resourceNames":["rdma/hca"],`+
				`"podResourcesSocket":%q,"dataDir":%q,"logFile":%q}`, tc.version, filepath.Join(dir, "kubelet.sock"), filepath.Join(dir, "state"), logFile)
			env := []string{"CNI_COMMAND=" + tc.verb, "CNI_CONTAINERID=c1", "CNI_IFNAME=eth0", "CNI_PATH=" + dir, "CNI_NETNS="}
			how := runBrokenPipes(t, bin, env, conf)
			log, _ := os.ReadFile(logFile)
			if how != fmt.Sprintf("exit status %d", tc.code) {
				t.Errorf("%s with the runtime gone: %s, want exit %d; log:\n%s", tc.verb, how, tc.code, log)
			}
			if !slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
				return strings.Contains(l, " "+tc.closing+" ") && strings.Contains(l, " verb="+tc.verb+" ")
			}) {
				t.Errorf("log file has no %s line of %s:\n%s", tc.closing, tc.verb, log)
			}
		})
	}
}

// runBrokenPipes runs bin with env and conf on stdin, its stdout and
// stderr pipes whose read ends are closed, as a dead runtime leaves them,
// and says how it ended: "exit status N" or "signal: S".
func runBrokenPipes(t *testing.T, bin string, env []string, conf string) string {
	t.Helper()
	stdin := filepath.Join(t.TempDir(), "conf.json")
	if err := os.WriteFile(stdin, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(stdin)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, in, w, w
	_ = cmd.Run()
	if ctx.Err() != nil || cmd.ProcessState == nil {
		t.Fatalf("%s did not start or did not exit by itself", bin)
	}
	return cmd.ProcessState.String()
}
