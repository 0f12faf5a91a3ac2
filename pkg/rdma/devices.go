package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
)

// pciAddr reports whether s is a PCI address as the kernel names PCI
// devices: ^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ (checked without
// a regexp, whose compile at package init every plugin start would pay).
func pciAddr(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || len(parts[0]) < 4 || len(parts[1]) != 2 || !lowerHex(parts[0]) || !lowerHex(parts[1]) {
		return false
	}
	bus, fn, ok := strings.Cut(parts[2], ".")
	return ok && len(bus) == 2 && lowerHex(bus) && len(fn) == 1 && fn[0] >= '0' && fn[0] <= '7'
}

func lowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

// Devices returns every RDMA device visible in this netns, sorted by name,
// each mapped to its netdev. It returns an error wrapping ErrNoRDMA when the
// kernel has no RDMA subsystem, and an empty slice when the subsystem exists
// without devices.
func (s *System) Devices() ([]Device, error) {
	links, err := listLinks(s.nl())
	if err != nil {
		if isNoRDMA(err) {
			return s.sysfsDevices(err)
		}
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	m := newMapper(s)
	devs := make([]Device, 0, len(links))
	for _, l := range links {
		devs = append(devs, s.device(l.Attrs.Name, l, m))
	}
	sortDevices(devs)
	return devs, nil
}

// sysfsDevices lists devices from sysfs alone, for kernels whose RDMA
// netlink does not answer (nlErr). With no devices there either, the kernel
// has no RDMA subsystem.
func (s *System) sysfsDevices(nlErr error) ([]Device, error) {
	entries, err := os.ReadDir(s.ibPath())
	if err != nil || len(entries) == 0 {
		return nil, noRDMA("list RDMA devices", nlErr)
	}
	m := newMapper(s)
	devs := make([]Device, 0, len(entries))
	for _, e := range entries {
		devs = append(devs, s.device(e.Name(), nil, m))
	}
	sortDevices(devs)
	return devs, nil
}

// device builds the Device called name; link is its netlink record or nil.
func (s *System) device(name string, link *netlink.RdmaLink, m *mapper) Device {
	d := Device{Name: name, NodeGUID: s.nodeGUID(name, link)}
	d.PCI, d.Driver = s.parent(name)
	d.Netdev = m.netdev(name, link, d.NodeGUID)
	if d.PCI == "" && softDriver(name) == "" {
		// A device registered without a parent (eRDMA-like devices on a
		// virtio NIC) is the RDMA function of its netdev's PCI function.
		d.PCI = s.netdevPCI(d.Netdev)
	}
	return d
}

// nodeGUID reads sysfs node_guid, falling back to the netlink record.
func (s *System) nodeGUID(name string, link *netlink.RdmaLink) string {
	if b, err := os.ReadFile(filepath.Join(s.ibPath(), name, "node_guid")); err == nil {
		if g := strings.ToLower(strings.TrimSpace(string(b))); g != "" {
			return g
		}
	}
	if link != nil {
		return guidFromNetlink(link.Attrs.NodeGuid)
	}
	return ""
}

// parent returns the PCI address (of the parent, or of the virtio
// device's PCI function) and the kernel driver of device name. Soft devices
// are named by their driver (rxe*, siw*): that wins over the device symlink,
// which for rxe may point at the underlying NIC.
func (s *System) parent(name string) (pci, driver string) {
	devLink := filepath.Join(s.ibPath(), name, "device")
	pci = pciFunctionOf(devLink)
	if driver = softDriver(name); driver != "" {
		return "", driver
	}
	if target, err := os.Readlink(filepath.Join(devLink, "driver")); err == nil {
		driver = filepath.Base(target)
	}
	return pci, driver
}

// driverOf returns the kernel driver of device name ("" if unknown).
func (s *System) driverOf(name string) string {
	_, drv := s.parent(name)
	return drv
}

// softDriver names the driver of a software RDMA device from its name.
func softDriver(name string) string {
	switch {
	case strings.HasPrefix(name, "rxe"):
		return "rdma_rxe"
	case strings.HasPrefix(name, "siw"):
		return "siw"
	default:
		return ""
	}
}

// ibPath is /sys/class/infiniband under SysRoot.
func (s *System) ibPath() string {
	return filepath.Join(s.sysRoot(), "class", "infiniband")
}

// netPath is /sys/class/net under SysRoot.
func (s *System) netPath() string {
	return filepath.Join(s.sysRoot(), "class", "net")
}

// sortDevices sorts devs by name.
func sortDevices(devs []Device) {
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
}

// Visible reports whether RDMA netlink in the calling netns finds the
// device dev (in exclusive mode: it is not in a pod's netns). Any failure
// to find it reads as not visible: the caller only acts on a device it
// sees.
func (s *System) Visible(dev string) bool {
	_, err := s.nl().LinkByName(dev)
	return err == nil
}
