package rdma

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// From include/uapi/rdma/rdma_netlink.h (Linux 6.12): the RDMA netlink
// monitor's multicast group (device registration and netdev attach/detach
// events, RDMA_NLDEV_CMD_MONITOR, Linux 6.11), and the attribute of the
// RDMA_NLDEV_CMD_SYS_GET reply by which a kernel says it has the monitor.
const (
	nlGroupNotify    = 4   // RDMA_NL_GROUP_NOTIFY
	nlDevCmdSysGet   = 6   // RDMA_NLDEV_CMD_SYS_GET
	nlSysAttrMonitor = 103 // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE
	nlAttrTypeMask   = 0x3fff
	nlGetClientShift = 10
	nlClientNLDev    = 5 // RDMA_NL_NLDEV
)

// ErrNoMonitor means the kernel has no RDMA netlink monitor.
var ErrNoMonitor = errors.New("the kernel has no RDMA netlink monitor (its RDMA system attributes lack MONITOR_MODE; Linux 6.11 and later have it): link events alone trigger repairs")

// monitorSupported asks RDMA_NLDEV_CMD_SYS_GET whether the kernel reports
// RDMA_NLDEV_SYS_ATTR_MONITOR_MODE. Joining the group proves nothing:
// Linux 6.1 accepts the membership and never sends on it.
func monitorSupported() (bool, error) {
	req := nl.NewNetlinkRequest(nlClientNLDev<<nlGetClientShift|nlDevCmdSysGet, unix.NLM_F_ACK)
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return false, fmt.Errorf("RDMA system attributes: %w", err)
	}
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m)
		if err != nil {
			return false, fmt.Errorf("RDMA system attributes: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nlAttrTypeMask == nlSysAttrMonitor {
				return true, nil
			}
		}
	}
	return false, nil
}

// Monitor joins the RDMA netlink monitor group of the calling netns and
// calls fire for every message (and after dropped ones) until ctx ends;
// ErrNoMonitor on kernels without the monitor.
func Monitor(ctx context.Context, fire func()) error {
	if ok, err := monitorSupported(); err != nil || !ok {
		if err == nil {
			err = ErrNoMonitor
		}
		return err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_RDMA)
	if err != nil {
		return fmt.Errorf("RDMA netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind RDMA netlink socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, nlGroupNotify); err != nil {
		unix.Close(fd)
		return fmt.Errorf("join the RDMA monitor group: %w", err)
	}
	f := os.NewFile(uintptr(fd), "rdma-monitor")
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := f.Read(buf)
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case errors.Is(err, unix.ENOBUFS): // events were dropped: look anyway
			case err != nil:
				return
			case n == 0:
				continue
			}
			fire()
		}
	}()
	return nil
}
