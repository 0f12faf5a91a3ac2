package rdma

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// CheckMovable tells, before anything on the node changes, whether device d
// may change netns on a kernel of the given release (`uname -r`). Soft-RoCE
// and siw are refused on every kernel. Before 7.x their drivers lack
// disassociate_ucontext and the kernel answers EOPNOTSUPP. Debian's 7.3
// moves an rxe device between netns (move_rxe in docs/kernels.md's table),
// but on every kernel of that table moving rxe's netdev to another netns
// destroys the rxe device (rxe_netdev_move), and exclusive mode moves the
// netdev. erdma can move from Linux 6.12. Other drivers are left to the
// kernel's answer (EOPNOTSUPP) at move time.
func CheckMovable(d Device, kernelRelease string) error {
	switch d.Driver {
	case "rdma_rxe", "siw":
		return &UnsupportedMoveError{Device: d.Name, Driver: d.Driver, Err: syscall.EOPNOTSUPP}
	case "erdma":
		if olderThan(kernelRelease, 6, 12) {
			return &UnsupportedMoveError{Device: d.Name, Driver: d.Driver,
				Err: fmt.Errorf("kernel %s: %w", kernelRelease, syscall.EOPNOTSUPP)}
		}
	}
	return nil
}

// KernelRelease returns the running kernel's release string.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// olderThan reports whether release is below major.minor; an unparsable
// release is not considered older.
func olderThan(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return maj < major || (maj == major && mnr < minor)
}
