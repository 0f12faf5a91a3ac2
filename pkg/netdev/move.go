package netdev

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/undo"
)

// MoveToPod moves host netdev hostName from the CURRENT netns (the host) into
// podNS, named podName there, and sets it up. It records the HostLink first
// and rolls back every step it did if a later step fails, leaving the host as
// found (name, MTU, MAC, addresses, up state, the routes through it). The
// netdev is renamed in
// a private temporary netns, so no name can clash on the way, and the host
// name is kept in its alias (IFLA_IFALIAS). A podName that already exists in
// podNS is an error before anything changes.
//
// hostName and podName come from the plugin's validated configuration and
// the kernel; they are not checked again here.
func MoveToPod(hostName string, podNS ns.NetNS, podName string) (hl HostLink, err error) {
	s, err := newSession(podNS)
	if err != nil {
		return HostLink{}, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err = requireAbsent(s.pod, podName, "pod"); err != nil {
		return HostLink{}, err
	}
	link, err := s.host.LinkByName(hostName)
	if err != nil {
		return HostLink{}, fmt.Errorf("find host netdev %q: %w", hostName, err)
	}
	if hl, err = recordHostLink(s.host, link, podName); err != nil {
		return HostLink{}, err
	}
	if err = s.openTemp(); err != nil {
		return HostLink{}, err
	}
	var u undo.Stack
	if err = runSteps(s.moveInSteps(link, hl), &u); err == nil {
		err = hook("done")
	}
	if err != nil {
		return HostLink{}, u.Rollback(err)
	}
	return hl, nil
}

// recordHostLink captures what RestoreToHost needs to put link back.
func recordHostLink(h *netlink.Handle, link netlink.Link, podName string) (HostLink, error) {
	addrs, err := hostAddrs(h, link)
	if err != nil {
		return HostLink{}, err
	}
	routes, err := hostRoutes(h, link)
	if err != nil {
		return HostLink{}, err
	}
	a := link.Attrs()
	return HostLink{
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

// moveInSteps returns the steps host → temporary netns → pod. tl is the
// netdev as seen in the temporary netns; its index stays put there.
func (s *session) moveInSteps(link netlink.Link, hl HostLink) []step {
	var tl netlink.Link
	return []step{
		{"to-temp", func(u *undo.Stack) (err error) {
			tl, err = s.hostToTemp(link, hl, u)
			return err
		}},
		{"rename", func(u *undo.Stack) error {
			return renameIn(s.tmp, tl, hl.PodName, u)
		}},
		{"alias", func(u *undo.Stack) error {
			return setAliasIn(s.tmp, tl, hl.HostName, u)
		}},
		{"to-pod", func(u *undo.Stack) error {
			return s.tempToPod(tl, hl.PodName, u)
		}},
		{"up", func(u *undo.Stack) error {
			return s.upInPod(hl, u)
		}},
	}
}

// hostToTemp moves link from the host into the temporary netns. Its undo
// moves it back and restores the addresses and up state the move dropped.
func (s *session) hostToTemp(link netlink.Link, hl HostLink, u *undo.Stack) (netlink.Link, error) {
	if err := s.host.LinkSetNsFd(link, s.tmpFd()); err != nil {
		return nil, fmt.Errorf("move %q to a temporary netns: %w", hl.HostName, err)
	}
	u.Push(func() error { return s.tempToHost(hl) })
	tl, err := s.tmp.LinkByName(hl.HostName)
	if err != nil {
		return nil, fmt.Errorf("find %q in the temporary netns: %w", hl.HostName, err)
	}
	return tl, nil
}

// tempToHost moves the netdev named hl.HostName from the temporary netns back
// to the host and gives it its host addresses and up state again.
func (s *session) tempToHost(hl HostLink) error {
	tl, err := s.tmp.LinkByName(hl.HostName)
	if err != nil {
		return fmt.Errorf("find %q in the temporary netns: %w", hl.HostName, err)
	}
	if err := s.tmp.LinkSetNsFd(tl, int(s.hostNS)); err != nil {
		return fmt.Errorf("move %q back to the host: %w", hl.HostName, err)
	}
	link, err := s.host.LinkByName(hl.HostName)
	if err != nil {
		return fmt.Errorf("find %q back on the host: %w", hl.HostName, err)
	}
	return restoreHostState(s.host, link, hl)
}

// renameIn renames l in h's netns to name; the undo renames it back.
func renameIn(h *netlink.Handle, l netlink.Link, name string, u *undo.Stack) error {
	old := l.Attrs().Name
	if old == name {
		return nil
	}
	if err := h.LinkSetName(l, name); err != nil {
		return fmt.Errorf("rename %q to %q: %w", old, name, err)
	}
	u.Push(func() error {
		if err := h.LinkSetName(l, old); err != nil {
			return fmt.Errorf("rename %q back to %q: %w", name, old, err)
		}
		return nil
	})
	return nil
}

// setAliasIn sets l's alias in h's netns; the undo restores the old alias.
func setAliasIn(h *netlink.Handle, l netlink.Link, alias string, u *undo.Stack) error {
	old := l.Attrs().Alias
	if old == alias {
		return nil
	}
	if err := h.LinkSetAlias(l, alias); err != nil {
		return fmt.Errorf("set alias of %q to %q: %w", l.Attrs().Name, alias, err)
	}
	u.Push(func() error {
		if err := h.LinkSetAlias(l, old); err != nil {
			return fmt.Errorf("reset alias of %q: %w", l.Attrs().Name, err)
		}
		return nil
	})
	return nil
}

// tempToPod moves tl (named podName) from the temporary netns into the pod;
// the undo moves it back.
func (s *session) tempToPod(tl netlink.Link, podName string, u *undo.Stack) error {
	if err := s.tmp.LinkSetNsFd(tl, s.podFd); err != nil {
		return fmt.Errorf("move %q into the pod netns: %w", podName, err)
	}
	u.Push(func() error {
		pl, err := s.pod.LinkByName(podName)
		if err != nil {
			return fmt.Errorf("find %q in the pod netns: %w", podName, err)
		}
		if err := s.pod.LinkSetNsFd(pl, s.tmpFd()); err != nil {
			return fmt.Errorf("move %q out of the pod netns: %w", podName, err)
		}
		return nil
	})
	return nil
}

// upInPod checks the moved netdev in the pod and sets it up; the undo sets it down.
func (s *session) upInPod(hl HostLink, u *undo.Stack) error {
	pl, err := s.pod.LinkByName(hl.PodName)
	if err != nil {
		return fmt.Errorf("find %q in the pod netns: %w", hl.PodName, err)
	}
	if !sameMAC(linkMAC(pl), hl.MAC) {
		return fmt.Errorf("%q in the pod netns has MAC %s, want %s", hl.PodName, linkMAC(pl), hl.MAC)
	}
	if err := s.pod.LinkSetUp(pl); err != nil {
		return fmt.Errorf("set %q up in the pod netns: %w", hl.PodName, err)
	}
	u.Push(func() error { return s.pod.LinkSetDown(pl) })
	return nil
}

// Describe returns what MoveToPod would record for host netdev hostName
// (name, MAC, index, MTU, up state, addresses, routes) without changing
// anything, so a caller can write it down before the move: a process killed
// mid-move then still knows what to restore.
func Describe(hostName, podName string) (HostLink, error) {
	h, hostNS, err := hostHandles()
	if err != nil {
		return HostLink{}, err
	}
	defer hostNS.Close()
	defer h.Close()
	link, err := h.LinkByName(hostName)
	if err != nil {
		return HostLink{}, fmt.Errorf("find host netdev %q: %w", hostName, err)
	}
	return recordHostLink(h, link, podName)
}
