package guestkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

// NewNetNS makes a new network namespace pinned at path, as `ip netns
// add` does: a bind mount of a new netns on a file. No thread stays in
// it: the thread that made it goes back to its netns before its goroutine
// ends, as the runtime keeps a locked thread alive when it is the main
// one, and a thread left in the netns would keep it alive after its pin
// is gone (the kernel would give nothing back: the gone-netns cases).
func NewNetNS(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	_ = f.Close()
	done := make(chan error, 1)
	go func() {
		// Never unlocked: should the way back fail, the runtime ends
		// this thread rather than run other goroutines in the netns.
		runtime.LockOSThread()
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		orig, err := unix.Open(src, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("this thread's netns: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("unshare a netns: %w", err)
			return
		}
		err = unix.Mount(src, path, "none", unix.MS_BIND, "")
		if back := unix.Setns(orig, unix.CLONE_NEWNET); err == nil && back != nil {
			err = fmt.Errorf("back to this thread's netns: %w", back)
		}
		done <- err
	}()
	if err := <-done; err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// DeleteNetNS unpins the netns at path, as `ip netns del` does; the
// kernel destroys it once nothing else holds it. A path already gone is
// no error.
func DeleteNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SetUpNIC sets up nic as a node has it: MTU 1400, up, an IPv4 and an
// IPv6 address, a route through a gateway and a route in table 100.
func SetUpNIC(nic string) error {
	l, err := netlink.LinkByName(nic)
	if err != nil {
		return err
	}
	for _, step := range []func() error{
		func() error { return netlink.LinkSetMTU(l, 1400) },
		func() error { return netlink.LinkSetUp(l) },
		func() error { return netnstest.AddAddrTo(l, "192.168.88.1/24") },
		func() error { return netnstest.AddAddrTo(l, "fd00:88::1/64") },
		func() error { return AddRoute(l, "10.88.0.0/16", "192.168.88.254", 0) },
		func() error { return AddRoute(l, "10.89.0.0/16", "", 100) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("set up %s: %w", nic, err)
		}
	}
	return nil
}

// AddRoute adds a route to dst (via gw, if any) through l in table (0:
// main).
func AddRoute(l netlink.Link, dst, gw string, table int) error {
	_, n, err := net.ParseCIDR(dst)
	if err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: n, Gw: net.ParseIP(gw), Table: table})
}

// Poll calls cond every interval until it returns nil or timeout passes,
// and returns its last error: a check waits for a condition, never sleeps
// and then asserts. Bounded in time, not in calls: one call may take a
// while under TCG.
func Poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}
