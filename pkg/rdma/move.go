package rdma

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
)

// MoveToNetns moves RDMA device dev into the netns open at nsFd
// (RDMA_NLDEV_CMD_SET with RDMA_NLDEV_NET_NS_FD). EOPNOTSUPP from the
// kernel becomes *UnsupportedMoveError; a kernel without RDMA gives an
// error wrapping ErrNoRDMA.
func (s *System) MoveToNetns(dev string, nsFd int) error {
	if nsFd < 0 {
		return fmt.Errorf("rdma: move %s: invalid netns fd %d", dev, nsFd)
	}
	link, err := s.nl().LinkByName(dev)
	if err != nil {
		if isNoRDMA(err) {
			return noRDMA("move "+dev, err)
		}
		return fmt.Errorf("rdma: move %s: look up device: %w", dev, err)
	}
	err = s.nl().LinkSetNsFd(link, uint32(nsFd))
	return moveError(dev, s.driverOf(dev), err)
}

// ReturnToHost moves device dev from the netns at podNSPath back to the
// netns open at hostNsFd (normally init_net, opened by the caller). It talks
// to RDMA netlink through a handle created inside the pod netns that asks
// for NETLINK_RDMA explicitly. It returns nil when there is nothing to
// return: the pod netns is gone, the device is not in it, the RDMA mode is
// shared (devices are never moved then) or the kernel has no RDMA.
func ReturnToHost(dev, podNSPath string, hostNsFd int) error {
	if dev == "" || podNSPath == "" || hostNsFd < 0 {
		return fmt.Errorf("rdma: return %q from %q to fd %d: invalid argument", dev, podNSPath, hostNsFd)
	}
	n, closeNL, err := openNetnsNL(podNSPath)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || isNoRDMA(err) {
			return nil
		}
		return fmt.Errorf("rdma: return %s: open RDMA netlink in %s: %w", dev, podNSPath, err)
	}
	defer closeNL()
	link, err := podLink(n, dev)
	if link == nil || err != nil {
		return err
	}
	err = n.LinkSetNsFd(link, uint32(hostNsFd))
	if errors.Is(err, syscall.ENODEV) {
		return nil // the device left the pod netns meanwhile
	}
	return moveError(dev, softDriver(dev), err)
}

// podLink finds dev among the devices a pod-netns handle sees. It returns
// nil, nil when there is nothing to move back (shared mode, no RDMA, device
// absent).
func podLink(n Netlink, dev string) (*netlink.RdmaLink, error) {
	mode, err := n.SystemGetNetnsMode()
	if isNoRDMA(err) || (err == nil && Mode(mode) == ModeShared) {
		return nil, nil
	}
	links, err := listLinks(n)
	if err != nil {
		if isNoRDMA(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("rdma: return %s: list devices in pod netns: %w", dev, err)
	}
	for _, l := range links {
		if l.Attrs.Name == dev {
			return l, nil
		}
	}
	return nil, nil
}

// moveError classifies the kernel's answer to a netns move of dev.
func moveError(dev, driver string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EOPNOTSUPP):
		return &UnsupportedMoveError{Device: dev, Driver: driver, Err: err}
	case isNoRDMASocket(err):
		return noRDMA("move "+dev, err)
	default:
		return fmt.Errorf("rdma: move %s to netns: %w", dev, err)
	}
}

// InNetns reports whether RDMA device dev is visible in the netns at nsPath
// (for CNI CHECK in exclusive mode). A missing netns is an error.
func InNetns(dev, nsPath string) (bool, error) {
	n, closeNL, err := openNetnsNL(nsPath)
	if err != nil {
		return false, fmt.Errorf("rdma: open RDMA netlink in %s: %w", nsPath, err)
	}
	defer closeNL()
	links, err := listLinks(n)
	if err != nil {
		return false, fmt.Errorf("rdma: list devices in %s: %w", nsPath, err)
	}
	for _, l := range links {
		if l.Attrs.Name == dev {
			return true, nil
		}
	}
	return false, nil
}
