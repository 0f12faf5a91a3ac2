package state

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNetnsGone: the path no longer names a namespace: it is missing, or a
// plain file or directory a runtime left after unmounting the netns.
var ErrNetnsGone = errors.New("netns gone")

// NetnsInode returns the inode number of the network namespace at path, to
// be stored in Record.NetNSIno and compared later: a path recreated for
// another namespace (or as a plain file) has another inode. The path is
// resolved as the runtime gave it: a netns path is either a bind mount of an
// nsfs inode (/run/netns/x) or the kernel's /proc/<pid>/ns/net link, which
// must be followed to reach the namespace. It is first opened with O_PATH,
// which opens nothing but the name, and anything that is not a network
// namespace on nsfs is refused.
func NetnsInode(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("open netns %s: %w: %w", path, ErrNetnsGone, err)
	}
	if err != nil {
		return 0, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, fmt.Errorf("statfs netns %s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return 0, fmt.Errorf("netns %s is not a namespace (filesystem type %#x): %w", path, fs.Type, ErrNetnsGone)
	}
	// An nsfs inode can be opened without side effects; the ioctl needs a
	// real descriptor.
	nsfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(nsfd)
	typ, err := unix.IoctlRetInt(nsfd, unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, fmt.Errorf("namespace type of %s: %w", path, err)
	}
	if typ != unix.CLONE_NEWNET {
		return 0, fmt.Errorf("netns %s is not a network namespace (type %#x)", path, typ)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return 0, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return st.Ino, nil
}
