package netdev

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/undo"
)

// childKinds are link types that share their parent's MAC or sit on top of
// it; they are never the netdev itself when searching by MAC.
var childKinds = []string{"ipvlan", "ipvtap", "macvlan", "macvtap", "vlan", "bond", "bridge", "team"}

// RestoreToHost gives the netdev described by l back to the CURRENT netns
// (the host): down, renamed to HostName, MTU, HostAddrs re-added, up if
// WasUp, HostRoutes re-added;
// the MAC is left unchanged. When podNSPath names a live netns holding the
// netdev, it is moved out through a private temporary netns (rolled back
// into the pod on failure). Otherwise (podNSPath "" or gone) the netdev is
// looked up in the host by name, alias (HostName) or MAC, because the kernel
// returns a physical netdev to init_net, possibly renamed devN, when its netns
// dies. A netdev found nowhere gives a wrapped ErrGone. Restoring an already
// restored netdev changes nothing and returns nil. The host-side steps are
// idempotent and not rolled back: after an error, calling again converges.
func RestoreToHost(l HostLink, podNSPath string) error {
	// l comes back from an attachment record on disk (a trust boundary): a
	// host netdev is never renamed to a name the record cannot justify.
	if err := validName(l.HostName); err != nil {
		return fmt.Errorf("restore netdev from its record: %w", err)
	}
	if err := returnFromPod(l, podNSPath); err != nil {
		return err
	}
	host, hostNS, err := hostHandles()
	if err != nil {
		return err
	}
	defer hostNS.Close()
	defer host.Close()
	link, err := findInHost(host, l)
	if err != nil {
		return err
	}
	return restoreHostState(host, link, l)
}

// returnFromPod moves the netdev from the netns at podNSPath, if it is still
// there, into the host under HostName. A missing netns or netdev is no error.
func returnFromPod(l HostLink, podNSPath string) (err error) {
	podNS, gone, err := openNSPath(podNSPath)
	if err != nil || gone {
		return err
	}
	defer podNS.Close()
	s, err := newSession(podNS)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	pl, err := findInPod(s.pod, l)
	if err != nil || pl == nil {
		return err
	}
	if err = s.openTemp(); err != nil {
		return err
	}
	var u undo.Stack
	if err = runSteps(s.moveOutSteps(pl, l), &u); err != nil {
		return u.Rollback(err)
	}
	return nil
}

// findInPod returns the netdev in the pod: PodName with the recorded MAC, or
// any link with that MAC whose alias is HostName. nil, nil when absent.
func findInPod(h *netlink.Handle, l HostLink) (netlink.Link, error) {
	pl, err := h.LinkByName(l.PodName)
	if err == nil && sameMAC(linkMAC(pl), l.MAC) {
		return pl, nil
	}
	if err != nil && !isNotFound(err) {
		return nil, fmt.Errorf("look up %q in the pod netns: %w", l.PodName, err)
	}
	links, err := listLinks(h)
	if err != nil {
		return nil, err
	}
	for _, x := range links {
		if sameMAC(linkMAC(x), l.MAC) && x.Attrs().Alias == l.HostName {
			return x, nil
		}
	}
	return nil, nil
}

// moveOutSteps returns the steps pod → temporary netns → host.
func (s *session) moveOutSteps(pl netlink.Link, l HostLink) []step {
	var tl netlink.Link
	return []step{
		{"out-to-temp", func(u *undo.Stack) (err error) {
			tl, err = s.podToTemp(pl, u)
			return err
		}},
		{"out-rename", func(u *undo.Stack) error {
			return renameIn(s.tmp, tl, l.HostName, u)
		}},
		{"out-alias", func(u *undo.Stack) error {
			if tl.Attrs().Alias != l.HostName {
				return nil
			}
			return setAliasIn(s.tmp, tl, "", u)
		}},
		{"out-to-host", func(*undo.Stack) error {
			if err := s.tmp.LinkSetNsFd(tl, int(s.hostNS)); err != nil {
				return fmt.Errorf("move %q to the host: %w", l.HostName, err)
			}
			return nil
		}},
	}
}

// podToTemp moves pl from the pod into the temporary netns; the undo moves it
// back under its pod name and sets it up again if it was.
func (s *session) podToTemp(pl netlink.Link, u *undo.Stack) (netlink.Link, error) {
	name, wasUp := pl.Attrs().Name, isUp(pl)
	if err := s.pod.LinkSetNsFd(pl, s.tmpFd()); err != nil {
		return nil, fmt.Errorf("move %q out of the pod netns: %w", name, err)
	}
	u.Push(func() error { return s.tempToPodUp(name, wasUp) })
	tl, err := s.tmp.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("find %q in the temporary netns: %w", name, err)
	}
	return tl, nil
}

// tempToPodUp moves the link called name from the temporary netns into the
// pod and sets it up if up.
func (s *session) tempToPodUp(name string, up bool) error {
	tl, err := s.tmp.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %q in the temporary netns: %w", name, err)
	}
	if err := s.tmp.LinkSetNsFd(tl, s.podFd); err != nil {
		return fmt.Errorf("move %q back into the pod netns: %w", name, err)
	}
	if !up {
		return nil
	}
	pl, err := s.pod.LinkByName(name)
	if err == nil {
		err = s.pod.LinkSetUp(pl)
	}
	if err != nil {
		return fmt.Errorf("set %q up in the pod netns: %w", name, err)
	}
	return nil
}

// findInHost finds the netdev in the host among links with the recorded MAC
// (children such as vlan or ipvlan excluded), preferring HostName, then the
// alias HostName, then HostIndex, then the only candidate.
func findInHost(h *netlink.Handle, l HostLink) (netlink.Link, error) {
	links, err := listLinks(h)
	if err != nil {
		return nil, err
	}
	var cands []netlink.Link
	for _, x := range links {
		if sameMAC(linkMAC(x), l.MAC) && !slices.Contains(childKinds, x.Type()) {
			cands = append(cands, x)
		}
	}
	prefs := []func(netlink.Link) bool{
		func(x netlink.Link) bool { return x.Attrs().Name == l.HostName },
		func(x netlink.Link) bool { return x.Attrs().Alias == l.HostName },
		func(x netlink.Link) bool { return x.Attrs().Index == l.HostIndex },
	}
	for _, p := range prefs {
		if i := slices.IndexFunc(cands, p); i >= 0 {
			return cands[i], nil
		}
	}
	switch len(cands) {
	case 0:
		return nil, fmt.Errorf("netdev %q (MAC %s) not in the host or pod netns: %w", l.HostName, l.MAC, ErrGone)
	case 1:
		return cands[0], nil
	default:
		return nil, fmt.Errorf("netdev %q: %d host links have MAC %s, none named or aliased %q", l.HostName, len(cands), l.MAC, l.HostName)
	}
}

// restoreHostState gives link (already in the host) its recorded host
// identity. Each step is skipped when already in place, so it is idempotent.
func restoreHostState(h *netlink.Handle, link netlink.Link, l HostLink) error {
	a := link.Attrs()
	if a.Name != l.HostName {
		if err := h.LinkSetDown(link); err != nil {
			return fmt.Errorf("set %q down: %w", a.Name, err)
		}
		if err := h.LinkSetName(link, l.HostName); err != nil {
			return fmt.Errorf("rename %q to %q: %w", a.Name, l.HostName, err)
		}
	}
	if a.Alias == l.HostName {
		if err := h.LinkSetAlias(link, ""); err != nil {
			return fmt.Errorf("clear alias of %q: %w", l.HostName, err)
		}
	}
	if l.MTU > 0 && a.MTU != l.MTU {
		if err := h.LinkSetMTU(link, l.MTU); err != nil {
			return fmt.Errorf("set MTU of %q to %d: %w", l.HostName, l.MTU, err)
		}
	}
	if err := addAddrs(h, link, l.HostAddrs); err != nil {
		return err
	}
	if err := setUpState(h, link, l.WasUp); err != nil {
		return err
	}
	return addRoutes(h, link, l.HostRoutes)
}

// setUpState sets link up or down.
func setUpState(h *netlink.Handle, link netlink.Link, up bool) error {
	set, what := h.LinkSetDown, "down"
	if up {
		set, what = h.LinkSetUp, "up"
	}
	if err := set(link); err != nil {
		return fmt.Errorf("set %q %s: %w", link.Attrs().Name, what, err)
	}
	return nil
}
