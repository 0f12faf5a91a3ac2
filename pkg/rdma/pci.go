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
// links are read, never followed: the answer comes from the kernel's own
// paths.
func pciFunctionOf(deviceLink string) string {
	target := linkTarget(deviceLink)
	if target == "" {
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

// linkTarget returns where the symlink at link points, as a clean path.
// The kernel writes a class device's "device" link relative to the class
// device's real directory, and the class entry (class/net/eth0) is itself
// a link into devices/: "../../../virtio0" from
// devices/pci0000:00/0000:00:03.0/virtio0/net/eth0. Both links are read
// with Readlink and joined as strings.
func linkTarget(link string) string {
	target, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	if filepath.IsAbs(target) {
		return filepath.Clean(target)
	}
	dir := filepath.Dir(link)
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if dt, err := os.Readlink(dir); err == nil {
			if filepath.IsAbs(dt) {
				dir = dt
			} else {
				dir = filepath.Join(filepath.Dir(dir), dt)
			}
		}
	}
	return filepath.Join(dir, target)
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
