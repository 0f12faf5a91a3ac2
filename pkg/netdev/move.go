package netdev

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/undo"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// MoveToPod moves host netdev hostName from the CURRENT netns (the host) into
// podNS, named podName there, and sets it up. It records the HostLink first
// and rolls back every step it did if a later step fails, leaving the host as
// found (name, MTU, MAC, addresses, up state, the routes through it). The
// netdev crosses, is renamed and gets the host name as its alias
// (IFLA_IFALIAS) in one request (crossNetns), so no name can clash on the
// way. A podName that already exists in podNS is an error before anything
// changes.
//
// hostName and podName come from the plugin's validated configuration and
// the kernel; they are not checked again here.
func MoveToPod(hostName string, podNS ns.NetNS, podName string) (state.HostLink, error) {
	hl, err := Describe(hostName, podName)
	if err != nil {
		return state.HostLink{}, err
	}
	if err := MoveDescribed(hl, podNS); err != nil {
		return state.HostLink{}, err
	}
	return hl, nil
}

// MoveDescribed is MoveToPod for a netdev Describe has recorded, so that a
// caller who wrote hl down before the move does not read the host twice.
// The netdev must still be the one described (name, index and MAC); the
// addresses and routes restored later are the described ones.
func MoveDescribed(hl state.HostLink, podNS ns.NetNS) (err error) {
	s, err := newSession(podNS)
	if err != nil {
		return err
	}
	defer s.close()
	if err = requireAbsent(s.pod, hl.PodName, "pod"); err != nil {
		return err
	}
	link, err := s.host.LinkByName(hl.HostName)
	if err != nil {
		return fmt.Errorf("find host netdev %q: %w", hl.HostName, err)
	}
	if link.Attrs().Index != hl.HostIndex || !sameMAC(linkMAC(link), hl.MAC) {
		return fmt.Errorf("host netdev %q changed since it was described: index %d, MAC %s; described %d, %s",
			hl.HostName, link.Attrs().Index, linkMAC(link), hl.HostIndex, hl.MAC)
	}
	var u undo.Stack
	if err = runSteps(s.moveInSteps(link, hl), &u); err == nil {
		err = hook("done")
	}
	if err != nil {
		return u.Rollback(err)
	}
	return nil
}

// recordHostLink captures what RestoreToHost needs to put link back.
func recordHostLink(h *netlink.Handle, link netlink.Link, podName string) (state.HostLink, error) {
	addrs, err := hostAddrs(h, link)
	if err != nil {
		return state.HostLink{}, err
	}
	routes, err := hostRoutes(h, link)
	if err != nil {
		return state.HostLink{}, err
	}
	cookie, err := CurrentNetnsCookie()
	if err != nil {
		return state.HostLink{}, err
	}
	a := link.Attrs()
	return state.HostLink{
		HostNetns:  cookie,
		PermMAC:    permMAC(link),
		LinkKind:   link.Type(),
		HostName:   a.Name,
		PodName:    podName,
		MAC:        linkMAC(link),
		HostIndex:  a.Index,
		MTU:        a.MTU,
		WasUp:      isUp(link),
		HostAddrs:  addrs,
		HostRoutes: routes,
	}, nil
}

// moveInSteps returns the steps host → pod.
func (s *session) moveInSteps(link netlink.Link, hl state.HostLink) []step {
	return []step{
		{"to-pod", func(u *undo.Stack) error {
			return s.hostToPod(link, hl, u)
		}},
	}
}

// hostToPod moves link from the host into the pod as hl.PodName, aliased
// hl.HostName, and sets it up there. Its undo is registered first, as the
// request may fail after the move (crossNetns).
func (s *session) hostToPod(link netlink.Link, hl state.HostLink, u *undo.Stack) error {
	u.Push(func() error { return s.podToHost(hl) })
	alias := hl.HostName
	if err := crossNetns(nil, link.Attrs().Index, s.podFd, hl.PodName, &alias, true); err != nil {
		return fmt.Errorf("move %q into the pod netns as %q and set it up: %w", hl.HostName, hl.PodName, err)
	}
	return nil
}

// podToHost undoes hostToPod: it finds the netdev in the pod, under its pod
// or host name, moves it back and gives it its host addresses and up state
// again (the move dropped them). Not in the pod, it never left the host.
func (s *session) podToHost(hl state.HostLink) error {
	pl, err := findInPod(s.pod, hl)
	if err != nil || pl == nil {
		return err
	}
	if err := s.crossOut(pl, hl); err != nil {
		return err
	}
	link, err := s.host.LinkByName(hl.HostName)
	if err != nil {
		return fmt.Errorf("find %q back on the host: %w", hl.HostName, err)
	}
	return restoreHostState(s.host, link, hl)
}

// Describe returns what MoveToPod would record for host netdev hostName
// (name, MAC, index, MTU, up state, addresses, routes) without changing
// anything, so a caller can write it down before the move: a process killed
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
	return recordHostLink(h, link, podName)
}
