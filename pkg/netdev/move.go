package netdev

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Describe returns what the caller records before MoveToPod for host
// netdev hostName (name, MAC, index, MTU, up state, addresses, routes and
// what else identifies it) without changing anything: a process killed
// mid-move then still knows what to restore.
func Describe(hostName, podName string) (state.HostLink, error) {
	h, err := hostHandle()
	if err != nil {
		return state.HostLink{}, err
	}
	defer h.Close()
	link, err := h.LinkByName(hostName)
	if err != nil {
		return state.HostLink{}, fmt.Errorf("find host netdev %q: %w", hostName, err)
	}
	addrs, err := hostAddrs(h, link)
	if err != nil {
		return state.HostLink{}, err
	}
	routes, err := hostRoutes(h, link)
	if err != nil {
		return state.HostLink{}, err
	}
	cookie, err := netnsid.CurrentCookie()
	if err != nil {
		return state.HostLink{}, err
	}
	a := link.Attrs()
	return state.HostLink{
		HostNetns: cookie, PermMAC: permMAC(link), LinkKind: link.Type(),
		HostName: a.Name, PodName: podName, MAC: linkMAC(link), HostIndex: a.Index, MTU: a.MTU,
		WasUp: isUp(link), HostAddrs: addrs, HostRoutes: routes,
	}, nil
}

// MoveToPod moves the host netdev Describe gave hl for from the CURRENT
// netns (the host) into podNS, named hl.PodName there, aliased hl.HostName,
// and sets it up, in one request (crossNetns), so no name can clash on the
// way. The netdev must still be the one described (name, index and MAC),
// and hl.PodName must not exist in podNS: either is an error before
// anything changes.
//
// MoveToPod undoes nothing itself: the caller registers RestoreToHost(hl)
// as its undo before calling it. An error from the request may come after
// the netdev crossed (a name the kernel refuses only at the rename, an up
// that fails): it is then in the pod, where RestoreToHost finds it and
// gives the host back what Describe recorded.
//
// hl.HostName and hl.PodName come from the plugin's validated configuration
// and the kernel; they are not checked again here.
func MoveToPod(hl state.HostLink, podNS ns.NetNS) error {
	pod, err := handleAt(podNS.Fd(), "pod")
	if err != nil {
		return err
	}
	defer pod.Close()
	if err := requireAbsent(pod, hl.PodName, "pod"); err != nil {
		return err
	}
	host, err := hostHandle()
	if err != nil {
		return err
	}
	defer host.Close()
	link, err := host.LinkByName(hl.HostName)
	if err != nil {
		return fmt.Errorf("find host netdev %q: %w", hl.HostName, err)
	}
	if link.Attrs().Index != hl.HostIndex || !sameMAC(linkMAC(link), hl.MAC) {
		return fmt.Errorf("host netdev %q changed since it was described: index %d, MAC %s; described %d, %s",
			hl.HostName, link.Attrs().Index, linkMAC(link), hl.HostIndex, hl.MAC)
	}
	alias := hl.HostName
	if err := crossNetns(nil, link.Attrs().Index, int(podNS.Fd()), hl.PodName, &alias, true); err != nil {
		return fmt.Errorf("move %q into the pod netns as %q and set it up: %w", hl.HostName, hl.PodName, err)
	}
	return nil
}

// crossNetns moves the netdev with index idx from the netns of sock (nil:
// the caller's) into the netns behind toFd, named name there, in one
// RTM_SETLINK (what `ip link set DEV netns NS name NAME` sends). The kernel
// moves it, under name instead of its old one if that one is taken there,
// then renames it, all under one hold of the rtnl lock, so no name can
// clash on the way and nothing sees it half way. alias, when not nil,
// becomes its IFLA_IFALIAS ("" clears it); with up, the same request sets
// it up last. A name the kernel refuses only at the rename (or one taken
// since it was checked), or an up that fails, fails after the move: the
// netdev is then in the target netns, possibly under its old name, where
// the caller's undo finds it (moved in: findInPod).
func crossNetns(sock *nl.NetlinkSocket, idx, toFd int, name string, alias *string, up bool) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(idx)
	if up {
		msg.Flags, msg.Change = unix.IFF_UP, unix.IFF_UP
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(toFd))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	if alias != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(*alias)))
	}
	if sock != nil {
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	}
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
