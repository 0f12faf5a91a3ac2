package rdma

import (
	"time"

	"github.com/vishvananda/netlink"
)

// Mode is the RDMA subsystem's network-namespace mode (ib_core netns_mode).
type Mode string

const (
	// ModeShared means every RDMA device is visible in every netns (the default).
	ModeShared Mode = "shared"
	// ModeExclusive means a device is visible only in the netns it was moved to.
	ModeExclusive Mode = "exclusive"
)

// Device is one RDMA device as seen from the current netns.
type Device struct {
	Name     string // rxe0, erdma_0, mlx5_1
	Driver   string // kernel driver (mlx5_core, erdma, rdma_rxe, siw) or ""
	NodeGUID string // "xxxx:xxxx:xxxx:xxxx" as in sysfs node_guid
	Netdev   string // mapped netdev name in the current netns ("" if none found)
	PCI      string // PCI function of the device, or of its netdev through a virtio parent ("0000:3b:00.0"), else ""
}

// Netlink is the seam over the kernel's RDMA netlink (implemented by
// vishvananda/netlink; a fake in tests).
type Netlink interface {
	SystemGetNetnsMode() (string, error)
	LinkList() ([]*netlink.RdmaLink, error)
	LinkSetNsFd(link *netlink.RdmaLink, fd uint32) error
	LinkByName(name string) (*netlink.RdmaLink, error)
}

// PortNetdever is optionally implemented by a Netlink: it returns the netdev
// the kernel binds to port of link (RDMA_NLDEV_ATTR_NDEV_NAME), "" when the
// port has none in the caller's netns.
type PortNetdever interface {
	PortNetdev(link *netlink.RdmaLink, port uint32) (string, error)
}

// System reads and changes RDMA state through sysfs and RDMA netlink.
type System struct {
	SysRoot string  // sysfs mount point; "" means "/sys"
	NL      Netlink // RDMA netlink; nil means the kernel's, in the current netns
	Netns   Netns   // RDMA netlink in other netns; nil means the kernel's
	// HostWait bounds how long ReturnToHost waits for the kernel to give a
	// dead pod netns's device back to the host netns (the kernel does it
	// from its netns clean-up work, after the netns's last reference is
	// gone); 0 means DefaultHostWait.
	HostWait time.Duration
}

// New returns a System over the real kernel: /sys and RDMA netlink in the
// current netns.
func New() *System {
	return &System{SysRoot: "/sys", NL: kernelNL{}}
}

// sysRoot returns the sysfs root, defaulting to /sys.
func (s *System) sysRoot() string {
	if s.SysRoot == "" {
		return "/sys"
	}
	return s.SysRoot
}

// netns returns the seam over other netns, defaulting to the kernel's.
func (s *System) netns() Netns {
	if s.Netns == nil {
		return kernelNetns{}
	}
	return s.Netns
}

// hostWait returns HostWait, defaulting to DefaultHostWait.
func (s *System) hostWait() time.Duration {
	if s.HostWait == 0 {
		return DefaultHostWait
	}
	return s.HostWait
}

// nl returns the netlink seam, defaulting to the kernel's.
func (s *System) nl() Netlink {
	if s.NL == nil {
		return kernelNL{}
	}
	return s.NL
}
