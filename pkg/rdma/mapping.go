package rdma

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
)

// mapper maps RDMA devices to netdevs of the current netns. It caches the
// MAC-derived GUIDs of all netdevs for the eRDMA rule across one listing.
type mapper struct {
	s      *System
	byGUID map[string][]string // EUI-64 GUID of the MAC → netdevs, physical first
}

// newMapper returns a mapper over s.
func newMapper(s *System) *mapper { return &mapper{s: s} }

// netdev returns the netdev of device name; first hit wins:
//  1. ports/1/gid_attrs/ndevs/0 (soft-RoCE, RoCE HCAs), then the same
//     binding from RDMA netlink (RDMA_NLDEV_ATTR_NDEV_NAME) when available;
//  2. the netdevs of the device's PCI function (device/net/*);
//  3. the eRDMA rule: node_guid is the EUI-64 of the netdev's MAC.
func (m *mapper) netdev(name string, link *netlink.RdmaLink, guid string) string {
	if n := m.fromGIDAttrs(name); n != "" {
		return n
	}
	if n := m.fromNetlinkPort(link); n != "" {
		return n
	}
	if n := m.fromPCISiblings(name); n != "" {
		return n
	}
	return m.fromGUID(guid)
}

// fromGIDAttrs reads the netdev of GID 0 of port 1. The name counts only if
// that netdev exists in this netns (class/net/NAME).
func (m *mapper) fromGIDAttrs(name string) string {
	n := sysfsWord(m.s.portPath(name, 1, "gid_attrs", "ndevs", "0"))
	if n == "" || !m.netdevExists(n) {
		return ""
	}
	return n
}

// fromNetlinkPort asks RDMA netlink for the netdev of port 1, when the
// Netlink implementation can.
func (m *mapper) fromNetlinkPort(link *netlink.RdmaLink) string {
	pn, ok := m.s.nl().(PortNetdever)
	if !ok || link == nil {
		return ""
	}
	n, err := pn.PortNetdev(link, 1)
	if err != nil {
		return ""
	}
	return n
}

// fromPCISiblings returns the first netdev of the device's PCI function.
func (m *mapper) fromPCISiblings(name string) string {
	entries, err := os.ReadDir(filepath.Join(m.s.ibPath(), name, "device", "net"))
	if err != nil {
		return ""
	}
	for _, e := range entries { // ReadDir sorts by name
		if m.netdevExists(e.Name()) {
			return e.Name()
		}
	}
	return ""
}

// fromGUID applies the eRDMA rule: the netdev whose MAC's EUI-64 equals the
// device's node GUID. Physical netdevs win over virtual ones sharing a MAC.
func (m *mapper) fromGUID(guid string) string {
	if guid == "" {
		return ""
	}
	if m.byGUID == nil {
		m.byGUID = m.indexMACs()
	}
	if c := m.byGUID[strings.ToLower(guid)]; len(c) > 0 {
		return c[0]
	}
	return ""
}

// indexMACs reads class/net/*/address and indexes netdevs by GUIDFromMAC.
func (m *mapper) indexMACs() map[string][]string {
	idx := map[string][]string{}
	entries, err := os.ReadDir(m.s.netPath())
	if err != nil {
		return idx
	}
	for _, e := range entries {
		if g := m.macGUID(e.Name()); g != "" {
			idx[g] = append(idx[g], e.Name())
		}
	}
	for _, names := range idx {
		sort.SliceStable(names, func(i, j int) bool {
			return m.isPhysical(names[i]) && !m.isPhysical(names[j])
		})
	}
	return idx
}

// macGUID returns GUIDFromMAC of netdev's address, "" if it has no 6-byte MAC.
func (m *mapper) macGUID(netdev string) string {
	b, err := os.ReadFile(filepath.Join(m.s.netPath(), netdev, "address"))
	if err != nil {
		return ""
	}
	mac, err := net.ParseMAC(strings.TrimSpace(string(b)))
	if err != nil {
		return ""
	}
	g, err := GUIDFromMAC(mac)
	if err != nil {
		return ""
	}
	return g
}

// netdevExists reports whether class/net/NAME exists.
func (m *mapper) netdevExists(name string) bool {
	_, err := os.Lstat(filepath.Join(m.s.netPath(), name))
	return err == nil
}

// isPhysical reports whether netdev has a parent device (class/net/IF/device).
func (m *mapper) isPhysical(netdev string) bool {
	_, err := os.Lstat(filepath.Join(m.s.netPath(), netdev, "device"))
	return err == nil
}
