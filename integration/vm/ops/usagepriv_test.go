package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpsUsage's processes run as on a node: the pods' under another uid
// than the reader's, each in the cgroup kubelet makes for its pod (named
// after the UID of its record, K8S_POD_UID uid-<name>: usage-a's with the
// systemd driver's names, usage-b's with the cgroupfs driver's), and the
// reader (reconcile, inspect) as the DaemonSet's reconcile container:
// uid 0 with NET_ADMIN and SYS_ADMIN alone, in a pod cgroup of its own and
// a cgroup namespace rooted there (containerd's default on cgroup v2).
const (
	privexec     = "/usr/local/bin/privexec" // integration/vm/guest/privexec
	cgroupRoot   = "/sys/fs/cgroup"
	podUser      = "1000"
	readerCgroup = cgroupRoot + "/kubepods/besteffort/podds-reconcile/reconcile"
	// readerCaps is CAP_NET_ADMIN and CAP_SYS_ADMIN, as /proc/PID/status
	// prints a capability set.
	readerCaps = "0000000000201000"
)

// readerVia starts a program with the reconcile container's privileges.
var readerVia = []string{privexec, "-cgroup", readerCgroup, "-cgroupns", "-caps", "net_admin,sys_admin", "--"}

// podCgroup is the cgroup of pod p's container: kubelet's names for the
// pod's UID, the systemd driver's for usage-a, the cgroupfs driver's for
// usage-b.
func podCgroup(p *usagePod) string {
	uid := "uid-" + p.Name
	if p.Name == "usage-a" {
		esc := strings.ReplaceAll(uid, "-", "_")
		return cgroupRoot + "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc + ".slice/cri-containerd-" + p.Name + ".scope"
	}
	return cgroupRoot + "/kubepods/burstable/pod" + uid + "/" + p.Name
}

// setUpCgroups mounts cgroup v2 at /sys/fs/cgroup unless it is there,
// makes the pods' and the reader's cgroups, and lets uid podUser use the
// RDMA character devices (as a device plugin gives them to a container);
// when t ends the cgroups go, and the mount if it made it.
func setUpCgroups(t *testing.T, pods ...*usagePod) error {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	if !bytes.Contains(mounts, []byte(" "+cgroupRoot+" cgroup2 ")) {
		if err := unix.Mount("cgroup2", cgroupRoot, "cgroup2", 0, ""); err != nil {
			return fmt.Errorf("mount cgroup2 on %s: %w", cgroupRoot, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(cgroupRoot, 0) })
	}
	dirs := []string{readerCgroup}
	for _, p := range pods {
		dirs = append(dirs, podCgroup(p))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		t.Cleanup(func() {
			for ; d != cgroupRoot; d = filepath.Dir(d) {
				_ = os.Remove(d) // a parent another directory still uses stays
			}
		})
	}
	devs, err := filepath.Glob("/dev/infiniband/*")
	if err != nil || len(devs) == 0 {
		return fmt.Errorf("no /dev/infiniband devices (%w)", err)
	}
	for _, d := range devs {
		if err := os.Chmod(d, 0o666); err != nil {
			return err
		}
	}
	return nil
}

// podCommand runs argv in p's netns and cgroup under uid podUser, with no
// capability (CLONE_INTO_CGROUP: `ip netns exec` mounts its own /sys).
// The returned cleanup closes the cgroup's descriptor once started.
func podCommand(ctx context.Context, p *usagePod, argv []string) (*exec.Cmd, func(), error) {
	fd, err := unix.Open(podCgroup(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s's cgroup: %w", p.Name, err)
	}
	args := append([]string{"netns", "exec", p.Name, privexec, "-uid", podUser, "-gid", podUser, "--"}, argv...)
	cmd := exec.CommandContext(ctx, "/usr/sbin/ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return cmd, func() { _ = unix.Close(fd) }, nil
}

// privileges checks what the scenario relies on: the reader (pid reader)
// has the reconcile container's capabilities alone and its own cgroup
// namespace, each pod process (pids) runs under uid podUser in its pod's
// cgroup, and the reader's privileges cannot read a pod process's
// /proc/PID/ns/net (ptrace access), while its /proc/PID/cgroup names the
// pod.
func privileges(t *testing.T, reader int, pods []*usagePod, pids ...int) error {
	var errs []error
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", reader))
	if err != nil {
		return err
	}
	for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if !bytes.Contains(st, []byte(set+":\t"+readerCaps+"\n")) {
			errs = append(errs, fmt.Errorf("reader %d's %s is not %s: %s", reader, set, readerCaps, st))
		}
	}
	// this process's cgroup namespace is the host's
	want := "0::" + strings.TrimPrefix(readerCgroup, cgroupRoot) + "\n"
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", reader)); err != nil || string(cg) != want {
		errs = append(errs, fmt.Errorf("reader %d's cgroup %q (%w), want %q", reader, cg, err, want))
	}
	own, errOwn := os.Readlink("/proc/self/ns/cgroup")
	its, errIts := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", reader))
	if err := errors.Join(errOwn, errIts); err != nil || own == its {
		errs = append(errs, fmt.Errorf("reader %d's cgroup namespace %s is the host's %s (%w)", reader, its, own, err))
	}
	for i, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !bytes.Contains(st, []byte("\nUid:\t"+podUser+"\t")) {
			errs = append(errs, fmt.Errorf("pod process %d is not of uid %s (%w): %s", pid, podUser, err, st))
		}
		cg, err := exec.Command(readerVia[0], append(readerVia[1:], "/bin/busybox", "cat", fmt.Sprintf("/proc/%d/cgroup", pid))...).CombinedOutput()
		dir := podCgroup(pods[i])
		want := filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir) // the pod's and its container's
		if err != nil || !bytes.Contains(cg, []byte(want)) {
			errs = append(errs, fmt.Errorf("the reader reads pod process %d's cgroup as %q (%w), want %s", pid, cg, err, want))
		}
		t.Logf("pod process %d (uid %s): the reader reads its cgroup %s", pid, podUser, bytes.TrimSpace(cg))
		out, err := exec.Command(readerVia[0], append(readerVia[1:], "/bin/busybox", "stat", "-L", "-c", "%i", fmt.Sprintf("/proc/%d/ns/net", pid))...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("ermission denied")) {
			errs = append(errs, fmt.Errorf("the reader stats pod process %d's /proc/PID/ns/net: %q (%w), want permission denied", pid, out, err))
		}
	}
	return errors.Join(errs...)
}
