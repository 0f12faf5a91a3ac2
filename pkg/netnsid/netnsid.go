// Package netnsid says whether a netns path still names a network
// namespace, and which one: the one answer to "is this pod's netns gone"
// for ADD's reclaim, DEL, GC, the netdev and RDMA moves and the operator's
// reconcile.
//
// A netns path is either a bind mount of an nsfs inode (/run/netns/x) or
// the kernel's /proc/<pid>/ns/net link, which is followed to reach the
// namespace. It is gone when opening it gives ENOENT (removed, or the
// process behind /proc/<pid> exited or is a zombie) or when what it names
// is not on nsfs (a plain file or directory a runtime left after
// unmounting the netns). Any other error is an error: a caller that reads
// "gone" as "nothing to undo" must not guess.
package netnsid

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// ErrGone reports that a path no longer names a namespace.
var ErrGone = errors.New("netns gone")

// ID identifies a network namespace.
type ID struct {
	// Inode is its nsfs inode number, which the kernel gives another
	// namespace once this one is freed (measured in the VM tier).
	Inode uint64
	// Cookie is its SO_NETNS_COOKIE (Linux >= 5.14), never reused while
	// the system runs; 0 when the kernel cannot give it.
	Cookie uint64
}

// Gone reports whether path no longer names a namespace (see the package
// documentation).
func Gone(path string) (bool, error) {
	fd, err := open(path)
	if errors.Is(err, ErrGone) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	unix.Close(fd)
	return false, nil
}

// Of returns the identity of the network namespace at path: an error
// wrapping ErrGone when path no longer names a namespace. When the kernel
// cannot give the cookie, the ID holds the inode and the error says why.
func Of(path string) (ID, error) {
	fd, err := open(path)
	if err != nil {
		return ID{}, err
	}
	defer unix.Close(fd)
	// An nsfs inode can be opened without side effects; the ioctl and
	// setns need a real descriptor.
	nsfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ID{}, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(nsfd)
	typ, err := unix.IoctlRetInt(nsfd, unix.NS_GET_NSTYPE)
	if err != nil {
		return ID{}, fmt.Errorf("namespace type of %s: %w", path, err)
	}
	if typ != unix.CLONE_NEWNET {
		return ID{}, fmt.Errorf("netns %s is not a network namespace (type %#x)", path, typ)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return ID{}, fmt.Errorf("stat netns %s: %w", path, err)
	}
	id := ID{Inode: st.Ino}
	// A cookie is read from a socket made inside the netns: enter the one
	// just opened, not the path again.
	n, err := ns.GetNS("/proc/self/fd/" + strconv.Itoa(nsfd))
	if err == nil {
		err = n.Do(func(ns.NetNS) (err error) {
			id.Cookie, err = CurrentCookie()
			return err
		})
		n.Close()
	}
	if err != nil {
		return id, fmt.Errorf("netns cookie of %s: %w", path, err)
	}
	return id, nil
}

// soNetnsCookie is SO_NETNS_COOKIE (include/uapi/asm-generic/socket.h,
// Linux >= 5.14), which golang.org/x/sys/unix does not name.
const soNetnsCookie = 71

// CurrentCookie returns the cookie of the calling thread's netns: the
// SO_NETNS_COOKIE of a socket made there.
func CurrentCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	defer unix.Close(fd)
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	return cookie, nil
}

// open opens path with O_PATH, which opens nothing but the name, and
// refuses what is not on nsfs. The caller closes the descriptor.
func open(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("open netns %s: %w: %w", path, ErrGone, err)
	}
	if err != nil {
		return -1, fmt.Errorf("open netns %s: %w", path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("statfs netns %s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		unix.Close(fd)
		return -1, fmt.Errorf("netns %s is not a namespace (filesystem type %#x): %w", path, fs.Type, ErrGone)
	}
	return fd, nil
}
