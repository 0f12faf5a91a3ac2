//go:build containerd

package containerd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is the containerd child process this test started.
type daemon struct {
	rt     runtimeKind
	cmd    *exec.Cmd
	dir    string
	cfg    string
	netns  string // the netns containerd runs in (ptp's host side lives there)
	socket string
	log    string
	env    []string // more environment for containerd
	done   chan error
}

// configV2 is containerd 1.6's config (version 2): its own root, state and
// sockets under dir, and a CRI plugin that runs runc sandboxes from
// localhost/pause:test on the native snapshotter with the test's CNI
// folders, pod netns mounted under its state dir (so runs in parallel tell
// their netns apart). restrict_oom_score_adj is needed because the test machine lacks
// CAP_SYS_RESOURCE.
const configV2 = `version = 2
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
  netns_mounts_under_state_dir = true
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

// configV3 is the same for containerd 2.x (config version 3, where the CRI
// plugin is split into images and runtime plugins).
const configV3 = `version = 3
root = "{{dir}}/root"
state = "{{dir}}/run"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = "{{dir}}/containerd.sock"
[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins."io.containerd.transfer.v1.local"]
  [[plugins."io.containerd.transfer.v1.local".unpack_config]]
    platform = "linux/{{arch}}"
    snapshotter = "native"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "localhost/pause:test"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = "native"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{{bin}}"]
    conf_dir = "{{conf}}"
    max_conf_num = 1
`

// startContainerd writes the config and starts containerd in netns (a
// network namespace of the test's, loopback up), so ptp's host-side veths
// and routes land there and not in the machine's netns, and survive a
// restart. Cleanup stops it by its PID.
func startContainerd(t *testing.T, rt runtimeKind, dir, netns, cniBin, cniConf string, env ...string) *daemon {
	t.Helper()
	d := &daemon{rt: rt, dir: dir, netns: netns, socket: filepath.Join(dir, "containerd.sock"), log: filepath.Join(dir, "containerd.log"), env: env}
	tmpl := configV2
	if rt.major >= 2 {
		tmpl = configV3
	}
	cfg := strings.NewReplacer("{{dir}}", dir, "{{bin}}", cniBin, "{{conf}}", cniConf, "{{arch}}", runtime.GOARCH).Replace(tmpl)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d.cfg = filepath.Join(dir, "config.toml")
	writeFile(t, d.cfg, []byte(cfg))
	d.start(t)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// start runs containerd (nsenter and sh exec it, so the PID held is
// containerd's) with its own binary directory first in PATH, so it finds
// the shim of its own version.
func (d *daemon) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(d.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command("nsenter", "--net="+d.netns, "--", "/bin/sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		filepath.Join(d.rt.binDir, "containerd"), "--config", d.cfg)
	d.cmd.Env = append(os.Environ(), "PATH="+d.rt.binDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	d.cmd.Env = append(d.cmd.Env, d.env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the OS thread that started containerd exits, and
	// Go ends a thread whenever a goroutine locked to it ends (the netns
	// helpers of parallel tests do): start and wait on a thread of our own
	// that lives exactly as long as containerd.
	d.done = make(chan error, 1)
	started := make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}(d.cmd, d.done)
	if err := <-started; err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	if err := d.waitSocket(30 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, d.tail())
	}
}

// terminate sends SIGTERM to the PID this test started, then SIGKILL after
// 10s. Shims of running sandboxes stay, as on a containerd restart.
func (d *daemon) terminate(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Errorf("containerd (pid %d) ignored SIGTERM: killing it", d.cmd.Process.Pid)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	_ = os.Remove(d.socket)
}

// kill sends SIGKILL to the PID this test started, as a crash does, and
// waits for it to end; its shims and the plugins it was running live on.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill containerd (pid %d): %v", d.cmd.Process.Pid, err)
	}
	<-d.done
	_ = os.Remove(d.socket)
}

// restart stops containerd by its PID and starts it again on the same
// state, as an upgrade or a crash-restart does.
func (d *daemon) restart(t *testing.T) {
	t.Helper()
	d.terminate(t)
	d.start(t)
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

// stop terminates containerd and kills any shim of this containerd left
// behind (by PID, found by its -address argument, which names this test's
// socket): every sandbox should have been removed before.
func (d *daemon) stop(t *testing.T) {
	d.terminate(t)
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
