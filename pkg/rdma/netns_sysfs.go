package rdma

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetnsSysfs runs fn with a sysfs of the netns at nsPath mounted at /sys,
// as `ip netns exec` does: in exclusive mode a moved RDMA device's sysfs
// (its GID table) is visible only through a sysfs mounted from inside its
// netns. fn runs on a thread of its own, in a private mount namespace that
// is a slave of the host's, so nothing changes outside it; the thread is
// discarded afterwards (its goroutine ends locked to it).
func inNetnsSysfs(nsPath string, fn func(sysRoot string) error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime ends this thread
		done <- enterNetnsSysfs(nsPath, fn)
	}()
	return <-done
}

func enterNetnsSysfs(nsPath string, fn func(string) error) error {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns %s: %w", nsPath, err)
	}
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach /sys: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount the sysfs of netns %s: %w", nsPath, err)
	}
	return fn("/sys")
}
