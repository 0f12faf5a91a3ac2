package netdev

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// hostRoutes returns the routes of every table whose single nexthop is l,
// except those the kernel or router advertisements make (prefix routes,
// local table, RA routes). Multipath routes are not recorded.
func hostRoutes(h *netlink.Handle, l netlink.Link) ([]state.Route, error) {
	filter := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}
	routes, err := nldump.RouteListFiltered(h, netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes of %q: %w", l.Attrs().Name, err)
	}
	out := []state.Route{}
	for _, r := range routes {
		if keepRoute(r) {
			out = append(out, toRoute(r))
		}
	}
	return out, nil
}

func keepRoute(r netlink.Route) bool {
	return r.Protocol != unix.RTPROT_KERNEL && r.Protocol != unix.RTPROT_RA &&
		r.Table != unix.RT_TABLE_LOCAL && len(r.MultiPath) == 0 && r.Type == unix.RTN_UNICAST
}

func toRoute(r netlink.Route) state.Route {
	out := state.Route{Family: r.Family, Table: r.Table, Priority: r.Priority, Scope: uint8(r.Scope), Protocol: int(r.Protocol)}
	if r.Dst != nil && !isDefault(r.Dst) {
		out.Dst = r.Dst.String()
	}
	if r.Gw != nil {
		out.Gw = r.Gw.String()
	}
	if r.Src != nil {
		out.Src = r.Src.String()
	}
	return out
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0 && n.IP.IsUnspecified()
}

// addRoutes adds routes through l; a route already there is left alone.
func addRoutes(h *netlink.Handle, l netlink.Link, routes []state.Route) error {
	var errs []error
	for _, r := range routes {
		nr, err := netlinkRoute(r, l.Attrs().Index)
		if err == nil {
			err = h.RouteAdd(nr)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("restore route %+v on %q: %w", r, l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}

func netlinkRoute(r state.Route, linkIndex int) (*netlink.Route, error) {
	nr := &netlink.Route{
		LinkIndex: linkIndex, Family: r.Family, Table: r.Table, Priority: r.Priority,
		Scope: netlink.Scope(r.Scope), Protocol: netlink.RouteProtocol(r.Protocol),
		Gw: net.ParseIP(r.Gw), Src: net.ParseIP(r.Src),
	}
	if r.Dst != "" {
		_, dst, err := net.ParseCIDR(r.Dst)
		if err != nil {
			return nil, fmt.Errorf("parse route destination %q: %w", r.Dst, err)
		}
		nr.Dst = dst
	}
	return nr, nil
}
