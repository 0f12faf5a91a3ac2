package netdev

import (
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// childKinds are link types that share their parent's MAC or sit on top of
// it; a record without a kind never finds one of them by MAC alone.
var childKinds = []string{"ipvlan", "ipvtap", "macvlan", "macvtap", "vlan", "bond", "bridge", "team"}

// RestoreToHost gives the netdev described by l back to the CURRENT netns
// (the host): down, renamed to HostName, MTU, HostAddrs re-added, up if
// WasUp, HostRoutes re-added;
// the MAC is left unchanged. When podNSPath names a live netns holding the
// netdev, it is moved out under HostName in one request (crossNetns); when
// HostName is taken on the host, it stays in the pod, untouched, and the
// error says so. Otherwise (podNSPath "" or gone) the netdev is
// looked up in the host by name, alias (HostName) or MAC, because the kernel
// returns a physical netdev to init_net, possibly renamed devN, when its netns
// dies. A netdev found nowhere gives a wrapped ErrGone. Restoring an already
// restored netdev changes nothing and returns nil. The host-side steps are
// idempotent and not rolled back: after an error, calling again converges.
func RestoreToHost(l state.HostLink, podNSPath string) error {
	// l comes back from an attachment record on disk (a trust boundary): a
	// host netdev is never renamed to a name the record cannot justify.
	if err := validName(l.HostName); err != nil {
		return fmt.Errorf("restore netdev from its record: %w", err)
	}
	if err := returnFromPod(l, podNSPath); err != nil {
		return err
	}
	host, err := hostHandle()
	if err != nil {
		return err
	}
	defer host.Close()
	link, err := findInHost(host, l)
	if err != nil {
		return err
	}
	return restoreHostState(host, link, l)
}

// returnFromPod moves the netdev from the netns at podNSPath, if it is still
// there, into the host under HostName. A missing netns or netdev is no error.
func returnFromPod(l state.HostLink, podNSPath string) error {
	podNS, gone, err := openNSPath(podNSPath)
	if err != nil || gone {
		return err
	}
	defer podNS.Close()
	s, err := newSession(podNS)
	if err != nil {
		return err
	}
	defer s.close()
	pl, err := findInPod(s.pod, l)
	if err != nil || pl == nil {
		return err
	}
	// The request would move it and then fail the rename: refuse first.
	if err := requireAbsent(s.host, l.HostName, "host"); err != nil {
		return fmt.Errorf("give %q back: %w", l.HostName, err)
	}
	return s.crossOut(pl, l)
}

// findInPod returns the netdev in the pod: PodName with the recorded MAC, or
// any link with that MAC named or aliased HostName (a move that failed at
// the rename leaves it under HostName). nil, nil when absent.
func findInPod(h *netlink.Handle, l state.HostLink) (netlink.Link, error) {
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
		a := x.Attrs()
		if sameMAC(linkMAC(x), l.MAC) && !slices.Contains(childKinds, x.Type()) &&
			(a.Alias == l.HostName || a.Name == l.HostName) {
			return x, nil
		}
	}
	return nil, nil
}

// findInHost finds the netdev in the host. Name and MAC alone do not
// identify it: bond slaves share the bond's MAC, VLANs and macvlans their
// lower device's, and a netdev the kernel returned from a dead pod netns may
// be named devN. In order, it is:
//   - the link at HostIndex, with the recorded MAC or permanent address, when
//     the host netns is the one the index was recorded in (its cookie is
//     never reused, and the kernel gives a returning netdev its old index
//     when that is free, which it is, indexes being allocated cyclically),
//     or, for records without the cookie, when it is also named HostName;
//   - among the links with the recorded MAC or permanent address and the
//     recorded kind (without one: not a child kind), the one named HostName,
//     aliased HostName (the alias the move gave it), with the recorded
//     permanent address, or the only one.
func findInHost(h *netlink.Handle, l state.HostLink) (netlink.Link, error) {
	if x, err := h.LinkByIndex(l.HostIndex); l.HostIndex > 0 && err == nil && hasAddressOf(l, x) &&
		(x.Attrs().Name == l.HostName || l.HostNetns != 0 && l.HostNetns == currentCookie()) {
		return x, nil
	}
	links, err := listLinks(h)
	if err != nil {
		return nil, err
	}
	var cands []netlink.Link
	for _, x := range links {
		if hasAddressOf(l, x) && hasKindOf(l, x) {
			cands = append(cands, x)
		}
	}
	prefs := []func(netlink.Link) bool{
		func(x netlink.Link) bool { return x.Attrs().Name == l.HostName },
		func(x netlink.Link) bool { return x.Attrs().Alias == l.HostName },
		func(x netlink.Link) bool { return l.PermMAC != "" && sameMAC(permMAC(x), l.PermMAC) },
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
		return nil, fmt.Errorf("netdev %q: %d host links have MAC %s, none named or aliased %q, at index %d or with permanent address %q",
			l.HostName, len(cands), l.MAC, l.HostName, l.HostIndex, l.PermMAC)
	}
}

// hasAddressOf reports whether x carries the recorded MAC or permanent address.
func hasAddressOf(l state.HostLink, x netlink.Link) bool {
	return sameMAC(linkMAC(x), l.MAC) || l.PermMAC != "" && sameMAC(permMAC(x), l.PermMAC)
}

// hasKindOf reports whether x is of the recorded kind; records without one
// exclude the kinds that share a MAC with the netdev they sit on.
func hasKindOf(l state.HostLink, x netlink.Link) bool {
	if l.LinkKind != "" {
		return x.Type() == l.LinkKind
	}
	return !slices.Contains(childKinds, x.Type())
}

// currentCookie is netnsid.CurrentCookie, 0 when it cannot be read (then
// no recorded cookie matches).
func currentCookie() uint64 {
	c, err := netnsid.CurrentCookie()
	if err != nil {
		return 0
	}
	return c
}

// restoreHostState gives link (already in the host) its recorded host
// identity. Each step is skipped when already in place, so it is idempotent.
func restoreHostState(h *netlink.Handle, link netlink.Link, l state.HostLink) error {
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
