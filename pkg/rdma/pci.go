package rdma

import (
	"os"
	"path/filepath"
	"strings"
)

// pciFunctionOf returns the PCI address of the device a sysfs "device"
// link points at, "" when there is none. A PCI function is taken as is; a
// virtio device (virtioN, as virtio-net NICs and with them eRDMA's ENIs
// are) is resolved to its parent, the virtio-pci function it sits on. The
// link is read, never followed: the answer comes from the kernel's own
// path ("../../../devices/pci0000:00/0000:00:03.0/virtio0").
func pciFunctionOf(deviceLink string) string {
	target, err := os.Readlink(deviceLink)
	if err != nil {
		return ""
	}
	base := filepath.Base(target)
	if pciAddr(base) {
		return base
	}
	if isVirtio(base) {
		if parent := filepath.Base(filepath.Dir(target)); pciAddr(parent) {
			return parent
		}
	}
	return ""
}

// isVirtio reports whether s is a virtio bus device name: virtio[0-9]+.
func isVirtio(s string) bool {
	n, ok := strings.CutPrefix(s, "virtio")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// netdevPCI returns the PCI function of netdev through its device link
// (itself PCI, or a virtio device on one), "" without one.
func (s *System) netdevPCI(netdev string) string {
	if netdev == "" {
		return ""
	}
	return pciFunctionOf(filepath.Join(s.netPath(), netdev, "device"))
}
