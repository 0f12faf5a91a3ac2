package netdev

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// stackedKinds are the link kinds stacked on one lower netdev of the same
// netns (IFLA_LINK): moving the lower netdev takes them down with it.
var stackedKinds = []string{"vlan", "macvlan", "macvtap", "ipvlan", "ipvtap"}

// NodeUplinks maps each netdev of the CURRENT netns (the host) that carries
// the node's own traffic to what it carries. A netdev carries:
//   - a default route (IPv4 or IPv6) of the main table, the table the node's
//     own traffic uses, going out through it (any nexthop of a multipath
//     route counts);
//   - the node's address: the preferred source (src) of such a route is one
//     of its addresses (kubelet, without --node-ip, takes the address of the
//     default route's netdev, which the first rule already covers);
//   - one of nodeAddrs, the node's addresses as the cluster knows them
//     (kubelet's --node-ip may put one on a netdev no default route uses);
//   - any of these through an upper netdev: the bond, bridge or team it is
//     a port of (and their own masters), or a VLAN, macvlan or ipvlan stacked
//     on it in the host netns.
//
// Moving such a netdev into a pod takes the node, kubelet and every pod on
// it off the network. Routes of other tables (a per-NIC policy table) and
// addresses neither a default route nor nodeAddrs name do not count.
func NodeUplinks(nodeAddrs []netip.Addr) (map[string]string, error) {
	h, err := hostHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	addrs := sync.OnceValues(func() ([]netlink.Addr, error) {
		held, err := nldump.AddrList(h, nil, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list host addresses: %w", err)
		}
		return held, nil
	})
	direct, err := defaultRouteUse(h, addrs)
	if err == nil {
		err = nodeAddressUse(nodeAddrs, addrs, direct)
	}
	if err != nil || len(direct) == 0 {
		return map[string]string{}, err
	}
	links, err := nldump.LinkList(h)
	if err != nil {
		return nil, fmt.Errorf("list host netdevs: %w", err)
	}
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	return propagateDown(direct, links, byIndex), nil
}

// defaultRouteUse maps the index (> 0) of each netdev a main-table default route
// goes out through, or whose address is such a route's source, to what
// that is.
// addrs lists the host's addresses (one dump, shared with nodeAddressUse).
func defaultRouteUse(h *netlink.Handle, addrs func() ([]netlink.Addr, error)) (map[int][]string, error) {
	out := map[int][]string{}
	add := func(idx int, what string) {
		if idx > 0 && !slices.Contains(out[idx], what) {
			out[idx] = append(out[idx], what)
		}
	}
	for _, fam := range []struct {
		family int
		name   string
	}{{netlink.FAMILY_V4, "IPv4"}, {netlink.FAMILY_V6, "IPv6"}} {
		filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
		routes, err := nldump.RouteListFiltered(h, fam.family, filter, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list %s routes of the main table: %w", fam.name, err)
		}
		for _, r := range routes {
			if (r.Dst != nil && !isDefault(r.Dst)) || r.Type != unix.RTN_UNICAST {
				continue
			}
			add(r.LinkIndex, "the node's "+fam.name+" default route")
			for _, nh := range r.MultiPath {
				add(nh.LinkIndex, "the node's "+fam.name+" default route")
			}
			if r.Src != nil {
				idx, err := addressOwner(addrs, r.Src)
				if err != nil {
					return nil, err
				}
				add(idx, "the node's address "+r.Src.String()+" (source of its "+fam.name+" default route)")
			}
		}
	}
	return out, nil
}

// nodeAddressUse adds to out the netdevs holding one of addrs.
func nodeAddressUse(nodeAddrs []netip.Addr, addrs func() ([]netlink.Addr, error), out map[int][]string) error {
	if len(nodeAddrs) == 0 {
		return nil
	}
	held, err := addrs()
	if err != nil {
		return err
	}
	for _, a := range held {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.LinkIndex <= 0 {
			continue
		}
		ip = ip.Unmap()
		if slices.Contains(nodeAddrs, ip) {
			what := "the node's address " + ip.String() + " (nodeAddresses)"
			if !slices.Contains(out[a.LinkIndex], what) {
				out[a.LinkIndex] = append(out[a.LinkIndex], what)
			}
		}
	}
	return nil
}

// addressOwner returns the index of the host netdev holding ip, 0 if none.
func addressOwner(addrs func() ([]netlink.Addr, error), ip net.IP) (int, error) {
	held, err := addrs()
	if err != nil {
		return 0, err
	}
	for _, a := range held {
		if a.IP.Equal(ip) {
			return a.LinkIndex, nil
		}
	}
	return 0, nil
}

// propagateDown gives what each upper netdev carries to its lower ones
// (ports of a master, the netdev a VLAN or macvlan is stacked on), through
// every level, and names each netdev's share by the upper it comes through.
func propagateDown(direct map[int][]string, links []netlink.Link, byIndex map[int]netlink.Link) map[string]string {
	lowers := map[int][]int{} // upper index -> lower indexes
	for _, l := range links {
		a := l.Attrs()
		if a.MasterIndex != 0 {
			lowers[a.MasterIndex] = append(lowers[a.MasterIndex], a.Index)
		}
		if slices.Contains(stackedKinds, l.Type()) && a.ParentIndex != 0 && a.NetNsID < 0 {
			lowers[a.Index] = append(lowers[a.Index], a.ParentIndex)
		}
	}
	out := map[string]string{}
	for idx, what := range direct {
		l, ok := byIndex[idx]
		if !ok {
			continue // gone since the route dump
		}
		upper := l.Attrs().Name
		mark(out, lowers, byIndex, idx, strings.Join(what, " and "), upper, map[int]bool{})
	}
	return out
}

// mark records what upper carries on idx and every netdev below it.
func mark(out map[string]string, lowers map[int][]int, byIndex map[int]netlink.Link, idx int, what, upper string, seen map[int]bool) {
	l, ok := byIndex[idx]
	if !ok || seen[idx] {
		return
	}
	seen[idx] = true
	name := l.Attrs().Name
	desc := what
	if name != upper {
		desc = what + " (through its upper netdev " + upper + ")"
	}
	if prev, ok := out[name]; ok && prev != desc {
		parts := []string{prev, desc}
		sort.Strings(parts)
		desc = strings.Join(parts, "; ")
	}
	out[name] = desc
	for _, low := range lowers[idx] {
		mark(out, lowers, byIndex, low, what, upper, seen)
	}
}
