package netdev

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// netnsLocalKinds are the link kinds whose mainline drivers mark the netdev
// netns-local (NETIF_F_NETNS_LOCAL, dev->netns_local since Linux 6.12): the
// kernel refuses to move them out of their netns (EINVAL).
var netnsLocalKinds = []string{"bond", "bridge", "team", "openvswitch", "batadv", "ppp"}

// NetnsLocal says why the netdev name of the CURRENT netns (the host) cannot
// leave it, or "" when it can: a kind whose driver keeps it in its netns, or
// the kernel's own "netns-local" feature. Kernels before 6.12 report that
// feature through ethtool for every such driver; since 6.12 it is a netdev
// field the kernel does not report, so the kind is what tells there.
func NetnsLocal(name string) (string, error) {
	h, err := hostHandle()
	if err != nil {
		return "", err
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		return "", fmt.Errorf("find host netdev %q: %w", name, err)
	}
	if kind := link.Type(); slices.Contains(netnsLocalKinds, kind) {
		return fmt.Sprintf("it is a %s, which the kernel keeps in its netns (NETIF_F_NETNS_LOCAL)", kind), nil
	}
	local, err := ethtoolFeature(name, "netns-local")
	if err != nil {
		return "", fmt.Errorf("read the features of %q: %w", name, err)
	}
	if local {
		return "the kernel reports it netns-local (NETIF_F_NETNS_LOCAL)", nil
	}
	return "", nil
}

// ethtool ioctl commands and string set (include/uapi/linux/ethtool.h).
const (
	ethtoolGStrings  = 0x1b
	ethtoolGSSetInfo = 0x37
	ethtoolGFeatures = 0x3a
	ethSSFeatures    = 4
	ethGStringLen    = 32
)

// ifreqData is struct ifreq with ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtool runs SIOCETHTOOL on name with data (a command struct).
func ethtool(fd int, name string, data unsafe.Pointer) error {
	var req ifreqData
	copy(req.name[:unix.IFNAMSIZ-1], name)
	req.data = data
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	return nil
}

// ethtoolFeature reports whether the netdev's active features include the
// named one; a kernel that does not name it reports false.
func ethtoolFeature(name, feature string) (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	info := struct {
		cmd, reserved uint32
		mask          uint64
		count         uint32
	}{cmd: ethtoolGSSetInfo, mask: 1 << ethSSFeatures}
	if err := ethtool(fd, name, unsafe.Pointer(&info)); err != nil {
		return false, fmt.Errorf("ETHTOOL_GSSET_INFO: %w", err)
	}
	n := int(info.count)
	if info.mask == 0 || n == 0 || n > 1024 {
		return false, nil
	}
	strs := make([]uint32, 3+n*ethGStringLen/4) // struct ethtool_gstrings
	strs[0], strs[1], strs[2] = ethtoolGStrings, ethSSFeatures, uint32(n)
	if err := ethtool(fd, name, unsafe.Pointer(&strs[0])); err != nil {
		return false, fmt.Errorf("ETHTOOL_GSTRINGS: %w", err)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&strs[3])), n*ethGStringLen)
	bit := -1
	for i := range n {
		s := raw[i*ethGStringLen : (i+1)*ethGStringLen]
		if end := bytes.IndexByte(s, 0); end >= 0 {
			s = s[:end]
		}
		if string(s) == feature {
			bit = i
			break
		}
	}
	if bit < 0 {
		return false, nil
	}
	blocks := (n + 31) / 32
	feats := make([]uint32, 2+4*blocks) // struct ethtool_gfeatures
	feats[0], feats[1] = ethtoolGFeatures, uint32(blocks)
	if err := ethtool(fd, name, unsafe.Pointer(&feats[0])); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return false, nil
		}
		return false, fmt.Errorf("ETHTOOL_GFEATURES: %w", err)
	}
	active := feats[2+4*(bit/32)+2] // block {available, requested, active, never_changed}
	return active&(1<<(bit%32)) != 0, nil
}
