//go:build containerd

package containerd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is the containerd child process this test started.
type daemon struct {
	cmd    *exec.Cmd
	dir    string
	socket string
	log    string
	done   chan error
}

// configTOML is containerd's config v2: its own root, state and sockets under
// dir, and a CRI plugin that runs runc sandboxes from localhost/pause:test on
// the native snapshotter with the test's CNI folders. restrict_oom_score_adj
// is needed because the test machine lacks CAP_SYS_RESOURCE.
const configTOML = `version = 2
root = "{{dir}}/root"
state = "{{dir}}/run"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{{dir}}/containerd.sock"
[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:test"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{bin}}"
    conf_dir = "{{conf}}"
    max_conf_num = 1
`

// startContainerd writes the config and starts containerd in a network
// namespace of its own (loopback up), so ptp's host-side veths and routes
// land there and not in the machine's netns. Cleanup stops it by its PID.
func startContainerd(t *testing.T, bin, dir, cniBin, cniConf string) *daemon {
	t.Helper()
	d := &daemon{dir: dir, socket: filepath.Join(dir, "containerd.sock"), log: filepath.Join(dir, "containerd.log")}
	cfg := strings.NewReplacer("{{dir}}", dir, "{{bin}}", cniBin, "{{conf}}", cniConf).Replace(configTOML)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	writeFile(t, cfgPath, []byte(cfg))
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// sh execs containerd, so the PID we hold is containerd's.
	d.cmd = exec.Command("/bin/sh", "-c", `ip link set lo up && exec "$0" "$@"`, bin, "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	if err := d.waitSocket(30 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, d.tail())
	}
	return d
}

// waitSocket waits until containerd's grpc socket exists or it exits.
func (d *daemon) waitSocket(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(d.socket); err == nil {
			return nil
		}
		select {
		case err := <-d.done:
			d.done <- err
			return fmt.Errorf("containerd exited before serving: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("containerd socket %s did not appear in %s", d.socket, limit)
}

// stop sends SIGTERM to the PID this test started, then SIGKILL after 10s,
// and kills any shim of this containerd left behind (by PID, found by its
// -address argument, which names this test's socket).
func (d *daemon) stop(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Errorf("containerd (pid %d) ignored SIGTERM: killing it", d.cmd.Process.Pid)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	for _, pid := range shimPIDs(d.socket) {
		t.Errorf("containerd shim pid %d outlived its sandboxes: killing it", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if t.Failed() {
		t.Logf("containerd log (%s):\n%s", d.log, d.tail())
	}
}

// shimPIDs lists containerd-shim processes started for socket.
func shimPIDs(socket string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.Contains(args[0], "containerd-shim") && strings.Contains(string(cmdline), socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tail returns the last 60 lines of containerd's log.
func (d *daemon) tail() string {
	b, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
