package rdma

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
)

// MoveToNetns moves RDMA device dev from the caller's netns into the netns
// open at nsFd (RDMA_NLDEV_CMD_SET with RDMA_NLDEV_NET_NS_FD). EOPNOTSUPP
// from the kernel becomes *UnsupportedMoveError; a kernel without RDMA gives
// an error wrapping ErrNoRDMA.
func (s *System) MoveToNetns(dev string, nsFd int) error {
	if nsFd < 0 {
		return fmt.Errorf("move RDMA device %s: invalid netns fd %d", dev, nsFd)
	}
	link, err := s.nl().LinkByName(dev)
	if err != nil {
		if isNoRDMA(err) {
			return noRDMA("move RDMA device "+dev, err)
		}
		return fmt.Errorf("move RDMA device %s: look it up: %w", dev, err)
	}
	err = s.nl().LinkSetNsFd(link, uint32(nsFd))
	return moveError(dev, s.driverOf(dev), err)
}

// DefaultHostWait is System.HostWait's default.
const DefaultHostWait = 5 * time.Second

// ReturnToHost moves device dev from the netns at podNSPath back to the
// netns open at hostNsFd (the caller's, normally init_net).
//
// The request is sent from a locked OS thread that has entered the pod
// netns: the kernel looks the device up in the calling thread's netns
// (current->nsproxy->net_ns in ib_device_set_netns_put), so a host thread
// gets ENODEV and the device stays in the pod (measured on 6.1 and 6.12).
//
// It returns nil when there is nothing to return: the RDMA mode is shared
// (devices are never moved), the kernel has no RDMA, or the device is not
// in the pod netns (ENODEV counts only when a fresh listing inside the pod
// agrees). When the pod netns path is gone, the kernel returns the device to
// init_net itself when the netns dies (VM tier, exclusive-rdma scenario):
// ReturnToHost waits up to HostWait for it to appear in the host netns and
// fails if it does not (a netns kept alive by some process still holds it).
func (s *System) ReturnToHost(dev, podNSPath string, hostNsFd int) error {
	if dev == "" || podNSPath == "" || hostNsFd < 0 {
		return fmt.Errorf("return RDMA device %q from netns %q to fd %d: invalid argument", dev, podNSPath, hostNsFd)
	}
	err := s.netns().Enter(podNSPath, func(n Netlink) error { return returnFromPod(n, dev, hostNsFd) })
	if errors.Is(err, netnsid.ErrGone) {
		return s.waitInHost(dev, podNSPath, hostNsFd)
	}
	if err != nil {
		return fmt.Errorf("return RDMA device %s from netns %s: %w", dev, podNSPath, err)
	}
	return nil
}

// returnFromPod runs inside the pod netns: it moves dev to the netns open
// at hostNsFd when dev is there.
func returnFromPod(n Netlink, dev string, hostNsFd int) error {
	link, err := podLink(n, dev)
	if link == nil || err != nil {
		return err
	}
	err = n.LinkSetNsFd(link, uint32(hostNsFd))
	if errors.Is(err, syscall.ENODEV) {
		// Sent from inside the pod netns, ENODEV says the kernel no longer
		// finds dev there: believe it only when the pod's listing agrees.
		if again, lerr := podLink(n, dev); lerr == nil && again == nil {
			return nil
		}
	}
	return moveError(dev, softDriver(dev), err)
}

// podLink finds dev among the devices the pod netns sees. It returns nil,
// nil when there is nothing to move back (shared mode, no RDMA, device
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
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	return findLink(links, dev), nil
}

// waitInHost waits until dev is visible in the netns open at hostNsFd.
func (s *System) waitInHost(dev, podNSPath string, hostNsFd int) error {
	n, closeNL, err := s.netns().At(hostNsFd)
	if err != nil {
		if isNoRDMA(err) {
			return nil
		}
		return fmt.Errorf("netns %s is gone; look for RDMA device %s in the host netns: %w", podNSPath, dev, err)
	}
	defer closeNL()
	deadline := time.Now().Add(s.hostWait())
	for {
		mode, err := n.SystemGetNetnsMode()
		if isNoRDMA(err) || (err == nil && Mode(mode) == ModeShared) {
			return nil
		}
		links, err := listLinks(n)
		if err != nil && !isNoRDMA(err) {
			return fmt.Errorf("netns %s is gone; list RDMA devices of the host netns: %w", podNSPath, err)
		}
		if err != nil || findLink(links, dev) != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns %s is gone but RDMA device %s did not come back to the host netns within %s "+
				"(a process may keep that netns alive)", podNSPath, dev, s.hostWait())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// findLink returns the link named dev, or nil.
func findLink(links []*netlink.RdmaLink, dev string) *netlink.RdmaLink {
	for _, l := range links {
		if l.Attrs.Name == dev {
			return l
		}
	}
	return nil
}

// moveError classifies the kernel's answer to a netns move of dev.
func moveError(dev, driver string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EOPNOTSUPP):
		return &UnsupportedMoveError{Device: dev, Driver: driver, Err: err}
	case isNoRDMASocket(err):
		return noRDMA("move RDMA device "+dev, err)
	default:
		return fmt.Errorf("move RDMA device %s to another netns: %w", dev, err)
	}
}

// InNetns reports whether RDMA device dev is visible in the netns at nsPath
// (for CNI CHECK in exclusive mode), listed from a thread inside that netns.
// A missing netns is an error.
func (s *System) InNetns(dev, nsPath string) (bool, error) {
	found := false
	err := s.netns().Enter(nsPath, func(n Netlink) error {
		links, err := listLinks(n)
		if err != nil {
			return fmt.Errorf("list RDMA devices: %w", err)
		}
		found = findLink(links, dev) != nil
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("look for RDMA device %s in netns %s: %w", dev, nsPath, err)
	}
	return found, nil
}
