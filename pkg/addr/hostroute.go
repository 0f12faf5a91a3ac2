package addr

import (
	"fmt"
	"net"
	"strings"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// HostRouteWarning checks, in the calling thread's CURRENT netns (the
// host), whether netdev parent has an address in the same subnet as any of
// ips, or whether the kernel routes any of them via parent. It returns a
// human-readable warning when neither holds (soft-RoCE and routed fabrics
// need one for RDMA between pods) and "" otherwise. It never fails: lookup
// errors become the warning text.
func HostRouteWarning(parent string, ips []*types100.IPConfig) string {
	pod := podAddrs(ips)
	if len(pod) == 0 {
		return ""
	}
	link, err := netlink.LinkByName(parent)
	if err != nil {
		return fmt.Sprintf("cannot check the host route to pod RDMA addresses: netdev %q: %v", parent, err)
	}
	addrs, err := hostAddrs(link)
	if err != nil {
		return fmt.Sprintf("cannot check the host route to pod RDMA addresses: addresses of %q: %v", parent, err)
	}
	for _, p := range pod {
		if sameSubnet(addrs, p) || routedVia(link, p.IP) {
			return ""
		}
	}
	return fmt.Sprintf("host netdev %s has no address in the subnet of %s and no route to it via %s; "+
		"RDMA between pods over soft-RoCE or a routed fabric needs one (e.g. a node address in that subnet with nodad)",
		parent, joinNets(pod), parent)
}

// podAddrs returns the addresses of ips, skipping empty entries.
func podAddrs(ips []*types100.IPConfig) []net.IPNet {
	var out []net.IPNet
	for _, ipc := range ips {
		if ipc != nil && ipc.Address.IP != nil {
			out = append(out, ipc.Address)
		}
	}
	return out
}

// hostAddrs lists link's addresses in the current netns.
func hostAddrs(link netlink.Link) ([]netlink.Addr, error) {
	return nldump.AddrList(nil, link, netlink.FAMILY_ALL)
}

// sameSubnet reports whether one of addrs shares a subnet with p.
func sameSubnet(addrs []netlink.Addr, p net.IPNet) bool {
	podNet := net.IPNet{IP: p.IP.Mask(p.Mask), Mask: p.Mask}
	for _, a := range addrs {
		if a.IPNet != nil && (a.Contains(p.IP) || podNet.Contains(a.IP)) {
			return true
		}
	}
	return false
}

// routedVia reports whether the kernel's route to ip leaves through link.
func routedVia(link netlink.Link, ip net.IP) bool {
	routes, err := netlink.RouteGet(ip)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.LinkIndex == link.Attrs().Index {
			return true
		}
	}
	return false
}

// joinNets renders nets as a comma-separated list.
func joinNets(nets []net.IPNet) string {
	s := make([]string, len(nets))
	for i := range nets {
		s[i] = nets[i].String()
	}
	return strings.Join(s, ", ")
}
