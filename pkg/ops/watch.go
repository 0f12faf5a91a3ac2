package ops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// From include/uapi/rdma/rdma_netlink.h (Linux 6.12): the RDMA netlink
// monitor's multicast group (device registration and netdev attach/detach
// events, RDMA_NLDEV_CMD_MONITOR, Linux 6.11), and the attribute of the
// RDMA_NLDEV_CMD_SYS_GET reply by which a kernel says it has the monitor.
const (
	rdmaNLGroupNotify    = 4   // RDMA_NL_GROUP_NOTIFY
	rdmaNLDevCmdSysGet   = 6   // RDMA_NLDEV_CMD_SYS_GET
	rdmaNLSysAttrMonitor = 103 // RDMA_NLDEV_SYS_ATTR_MONITOR_MODE
	rdmaNLAttrTypeMask   = 0x3fff
	rdmaNLGetClientShift = 10
	rdmaNLClientNLDev    = 5 // RDMA_NL_NLDEV
)

// errNoRDMAMonitor: the kernel has no RDMA netlink monitor.
var errNoRDMAMonitor = errors.New("the kernel has no RDMA netlink monitor (its RDMA system attributes lack MONITOR_MODE; Linux 6.11 and later have it): link events alone trigger repairs")

// rdmaMonitorSupported asks RDMA_NLDEV_CMD_SYS_GET whether the kernel
// reports RDMA_NLDEV_SYS_ATTR_MONITOR_MODE. Joining the group proves
// nothing: Linux 6.1 accepts the membership and never sends on it.
func rdmaMonitorSupported() (bool, error) {
	req := nl.NewNetlinkRequest(rdmaNLClientNLDev<<rdmaNLGetClientShift|rdmaNLDevCmdSysGet, unix.NLM_F_ACK)
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
			if a.Attr.Type&rdmaNLAttrTypeMask == rdmaNLSysAttrMonitor {
				return true, nil
			}
		}
	}
	return false, nil
}

// eventSink delivers kernel events to the repair loop: one pending event
// is kept, the rest coalesce into it.
type eventSink struct {
	ch chan time.Time
	r  *reconciler
}

func (s eventSink) fire(source string) {
	s.r.metrics.events.WithLabelValues(source).Inc()
	select {
	case s.ch <- time.Now():
	default:
	}
}

// sourceUp reports whether the event source started: the watching gauge,
// and the reason once when it did not.
func (s eventSink) sourceUp(source string, err error, format string) {
	if err != nil {
		s.r.metrics.watching.WithLabelValues(source).Set(0)
		say(s.r.out, format, err)
		return
	}
	s.r.metrics.watching.WithLabelValues(source).Set(1)
}

// Watch starts the event sources: rtnetlink link events of this
// netns (a refunded NIC appears here when its pod netns dies) and the RDMA
// netlink monitor where the kernel has it. A source that fails is said
// once; the --interval pass remains the safety net.
func (kernelNode) Watch(ctx context.Context, sink eventSink) {
	sink.sourceUp("rtnetlink", watchLinks(ctx, sink), "reconcile: cannot listen to link events (%v): repairs wait for the next pass\n")
	sink.sourceUp("rdma", watchRDMA(ctx, sink), "reconcile: RDMA monitor: %v\n")
}

// watchLinks subscribes to RTNLGRP_LINK and fires on every new or changed
// link. When the subscription breaks (a full socket buffer drops events)
// it subscribes again and fires once for what it may have missed.
func watchLinks(ctx context.Context, sink eventSink) error {
	subscribe := func() (chan netlink.LinkUpdate, error) {
		ch := make(chan netlink.LinkUpdate, 64)
		err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}})
		return ch, err
	}
	ch, err := subscribe()
	if err != nil {
		return err
	}
	go func() {
		for {
			for u := range ch {
				if u.Header.Type == unix.RTM_NEWLINK {
					sink.fire("rtnetlink")
				}
			}
			for ctx.Err() == nil {
				if ch, err = subscribe(); err == nil {
					sink.fire("rtnetlink")
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// watchRDMA joins the RDMA netlink monitor group and fires on every
// message; errNoRDMAMonitor on kernels without the monitor.
func watchRDMA(ctx context.Context, sink eventSink) error {
	if ok, err := rdmaMonitorSupported(); err != nil || !ok {
		if err == nil {
			err = errNoRDMAMonitor
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
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, rdmaNLGroupNotify); err != nil {
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
			sink.fire("rdma")
		}
	}()
	return nil
}
