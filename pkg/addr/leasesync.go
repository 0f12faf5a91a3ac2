package addr

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// errNotAStore means the conf's dataDir and network name no host-local store.
var errNotAStore = errors.New("not a host-local store")

// SyncHostLocalLeases waits until the lease files host-local wrote for
// ips in its store for network under dataDir are on disk, with the
// directory entries naming them.
//
// host-local creates a lease file and writes the container's ID into it
// without syncing, and its DEL releases only a file whose content names
// the container. After a power loss the file is often back empty (its
// name reached the disk, its content did not: the cluster tier's
// node-loss scenario measured exactly this on ext4), and such a lease is
// never released: its address is lost to the node's block for good. With
// the files synced before ADD returns, a record that survives a power loss
// names leases that do too, and releasing them works.
//
// Nothing is followed: a lease path that is a symbolic link is an error,
// as is a file that is not there (host-local's ADD returned the address,
// so it holds the file). dataDir and network come from the conf; each
// address's own String() is the file's name.
func SyncHostLocalLeases(dataDir, network string, ips []netip.Addr) error {
	if dataDir == "" || network == "" || network != filepath.Base(network) || network == ".." || network == "." {
		return fmt.Errorf("%w: network %q under %q", errNotAStore, network, dataDir)
	}
	if len(ips) == 0 {
		return nil
	}
	dir := filepath.Join(dataDir, network)
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dirfd)
	var errs []error
	for _, ip := range ips {
		name := ip.String()
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err})
			continue
		}
		if err := unix.Fsync(fd); err != nil {
			errs = append(errs, &os.PathError{Op: "fsync", Path: filepath.Join(dir, name), Err: err})
		}
		unix.Close(fd)
	}
	if err := unix.Fsync(dirfd); err != nil {
		errs = append(errs, &os.PathError{Op: "fsync", Path: dir, Err: err})
	}
	return errors.Join(errs...)
}
