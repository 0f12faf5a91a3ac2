package rdma

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// ErrNoRDMA means this kernel has no RDMA subsystem (no ib_core / nothing answers
// RDMA netlink and /sys/class/infiniband is absent).
var ErrNoRDMA = errors.New("kernel has no RDMA subsystem")

// UnsupportedMoveError says the kernel answered EOPNOTSUPP to moving a device
// between netns (shared mode, or a driver without disassociate_ucontext:
// rxe, siw, erdma before 6.12).
type UnsupportedMoveError struct {
	Device, Driver string
	Err            error
}

// Error names the device, its driver and what a move needs.
func (e *UnsupportedMoveError) Error() string {
	drv := e.Driver
	if drv == "" {
		drv = "unknown driver"
	}
	return fmt.Sprintf("kernel cannot move RDMA device %s (%s) between network namespaces: %v; "+
		"a move needs RDMA netns mode exclusive and a driver that supports netns moves "+
		"(mlx4, mlx5, hns, irdma, bnxt_re, mana_ib, erdma on Linux >= 6.12)", e.Device, drv, e.Err)
}

// Unwrap returns the kernel's error.
func (e *UnsupportedMoveError) Unwrap() error { return e.Err }

// isNoRDMA reports whether err is what RDMA netlink answers on a kernel
// without the RDMA subsystem. Measured with vishvananda/netlink on a kernel
// without ib_core: syscall.Errno EPROTONOSUPPORT ("protocol not supported")
// from socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA).
func isNoRDMA(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoRDMA) {
		return true
	}
	return isNoRDMASocket(err) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EOPNOTSUPP)
}

// isNoRDMASocket reports the errors that can only mean "no NETLINK_RDMA
// socket at all". Write requests use it: there ENOENT and EOPNOTSUPP are
// answers about the request, not about the subsystem.
func isNoRDMASocket(err error) bool {
	return errors.Is(err, syscall.EPROTONOSUPPORT) ||
		errors.Is(err, syscall.EAFNOSUPPORT) ||
		strings.Contains(err.Error(), "protocol not supported")
}

// noRDMA wraps err so that errors.Is finds both ErrNoRDMA and err.
func noRDMA(op string, err error) error {
	if errors.Is(err, ErrNoRDMA) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrNoRDMA, err)
}
