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
// is a slave of the host's, so nothing changes outside it. The thread goes
// back to its own netns and mount namespace before its goroutine ends
// locked to it: the runtime ends such a thread, except the main thread,
// which it keeps; one kept in the pod's namespaces would keep that netns
// (its sysfs mount holds it) alive after the pod is gone, and with it a
// moved NIC the kernel would have given back (the reconcile daemon reads
// pod netns for every metrics scrape).
func inNetnsSysfs(nsPath string, fn func(sysRoot string) error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread's root and working directory are
		// no longer the process's once it has had a mount namespace of
		// its own.
		runtime.LockOSThread()
		done <- enterNetnsSysfs(nsPath, fn)
	}()
	return <-done
}

func enterNetnsSysfs(nsPath string, fn func(string) error) (err error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	back, err := ownNamespaces()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, back()) }()
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

// ownNamespaces opens this thread's netns and mount namespace and returns
// what puts the thread back in both.
func ownNamespaces() (back func() error, err error) {
	net, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("this thread's netns: %w", err)
	}
	mnt, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(net)
		return nil, fmt.Errorf("this thread's mount namespace: %w", err)
	}
	return func() error {
		defer unix.Close(net)
		defer unix.Close(mnt)
		var errs []error
		if err := unix.Setns(net, unix.CLONE_NEWNET); err != nil {
			errs = append(errs, fmt.Errorf("back to this thread's netns: %w", err))
		}
		if err := unix.Setns(mnt, unix.CLONE_NEWNS); err != nil {
			errs = append(errs, fmt.Errorf("back to this thread's mount namespace: %w", err))
		}
		return errors.Join(errs...)
	}, nil
}
