package netdev

import (
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Child is a shared-mode interface in the pod.
type Child struct {
	Name, MAC string
	Index     int // ifindex in the pod netns
	MTU       int
	// NetnsID is the host netns's nsid of the pod netns (nil: unknown):
	// with Index, the child's ChildID.
	NetnsID *int32
}

// ChildSpec describes a shared-mode child of a host netdev.
type ChildSpec struct {
	Kind    state.LinkKind // state.LinkIPVlan or state.LinkMACVlan
	Mode    string         // ipvlan: l2|l3|l3s; macvlan: bridge|private|vepa|passthru
	Parent  string         // host netdev
	PodName string         // name in the pod netns
	MTU     int            // 0 = parent's
}

var ipvlanModes = map[string]netlink.IPVlanMode{
	"l2": netlink.IPVLAN_MODE_L2, "l3": netlink.IPVLAN_MODE_L3, "l3s": netlink.IPVLAN_MODE_L3S,
}

var macvlanModes = map[string]netlink.MacvlanMode{
	"bridge": netlink.MACVLAN_MODE_BRIDGE, "private": netlink.MACVLAN_MODE_PRIVATE,
	"vepa": netlink.MACVLAN_MODE_VEPA, "passthru": netlink.MACVLAN_MODE_PASSTHRU,
}

// childLink builds the netlink object for spec: parent index parent,
// created directly in the netns behind podFd under spec.PodName, up.
func childLink(spec ChildSpec, parent, podFd int) (netlink.Link, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.ParentIndex, attrs.MTU = spec.PodName, parent, spec.MTU
	attrs.Index = drawChildIndex()
	attrs.Namespace = netlink.NsFd(podFd)
	attrs.Flags = net.FlagUp
	switch spec.Kind {
	case state.LinkIPVlan:
		mode, ok := ipvlanModes[spec.Mode]
		if !ok {
			return nil, fmt.Errorf("ipvlan mode %q is not l2, l3 or l3s", spec.Mode)
		}
		return &netlink.IPVlan{LinkAttrs: attrs, Mode: mode}, nil
	case state.LinkMACVlan:
		mode, ok := macvlanModes[spec.Mode]
		if !ok {
			return nil, fmt.Errorf("macvlan mode %q is not bridge, private, vepa or passthru", spec.Mode)
		}
		return &netlink.Macvlan{LinkAttrs: attrs, Mode: mode}, nil
	default:
		return nil, fmt.Errorf("child kind %q is not ipvlan or macvlan", spec.Kind)
	}
}

// AddChild creates a spec.Kind child of spec.Parent (a netdev of the CURRENT
// netns) directly in podNS (IFLA_NET_NS_FD, so no host name is ever used),
// named spec.PodName and up, in one request: the kernel unregisters a new
// link whose up fails. A child created but not read back is returned by
// name with the error: its undo, DelChild by name, is the caller's, as it
// is for every child AddChild returns. The child's ifindex is drawn from
// childIndexes, and the host netns gets an nsid for podNS (the Child's
// NetnsID; see ChildID). An existing spec.PodName
// in podNS is an error before anything changes; a kernel without the kind
// gives an error wrapping ErrKindUnsupported. spec comes from the plugin's
// validated configuration; it is not checked again here (the kernel
// rejects a name it cannot take).
func AddChild(spec ChildSpec, podNS ns.NetNS) (Child, error) {
	s, err := newSession(podNS)
	if err != nil {
		return Child{}, err
	}
	defer s.close()
	if err = requireAbsent(s.pod, spec.PodName, "pod"); err != nil {
		return Child{}, err
	}
	parent, err := s.host.LinkByName(spec.Parent)
	if err != nil {
		return Child{}, fmt.Errorf("find parent netdev %q: %w", spec.Parent, err)
	}
	if err := addChildLink(s.host.LinkAdd, spec, parent.Attrs().Index, s.podFd); err != nil {
		return Child{}, err
	}
	pl, err := s.pod.LinkByName(spec.PodName)
	if err != nil {
		return Child{Name: spec.PodName}, fmt.Errorf("find new %s %q in the pod netns: %w", spec.Kind, spec.PodName, err)
	}
	child := Child{Name: spec.PodName, MAC: linkMAC(pl), Index: pl.Attrs().Index, MTU: pl.Attrs().MTU}
	id, err := podNetnsID(s.host, s.podFd)
	if err != nil {
		return child, err
	}
	child.NetnsID = &id
	return child, nil
}

// addChildLink creates spec's child of parent in the pod netns behind
// podFd through add (the host handle's LinkAdd). An ifindex drawn that is
// taken (childIndexTaken) is drawn again, at most three times in all.
func addChildLink(add func(netlink.Link) error, spec ChildSpec, parent, podFd int) error {
	for attempt := 1; ; attempt++ {
		link, err := childLink(spec, parent, podFd)
		if err != nil {
			return err
		}
		err = add(link)
		switch {
		case err == nil:
			return nil
		case childIndexTaken(err) && attempt < 3:
			continue
		case errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("create %s %q on %q: %w (%w)", spec.Kind, spec.PodName, spec.Parent, ErrKindUnsupported, err)
		default:
			return fmt.Errorf("create %s %q on %q and set it up: %w", spec.Kind, spec.PodName, spec.Parent, err)
		}
	}
}

// childIndexTaken reports whether err is the kernel's refusal of a new
// link at an ifindex already taken (the name was checked absent). A link
// at that index in the pod netns gives EBUSY up to Linux 6.14, from
// register_netdevice (its own look-up; dev_index_reserve's xa_insert
// since 6.6), and EEXIST since 6.15, whose RTM_NEWLINK with
// NLM_F_CREATE|NLM_F_EXCL looks the index up in the target netns first
// (rtnetlink "Lookup device in target netns when creating link", applied
// in February 2025; measured on 6.18). Before that change the look-up ran
// in the caller's netns: a host link at the index gave EEXIST.
func childIndexTaken(err error) bool {
	return errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST)
}

// DelChild deletes the ipvlan/macvlan child name from the netns at
// podNSPath. A missing link is no error (idempotent), and so is a
// podNSPath that is empty or names no netns: a child recorded without
// its ChildID (an earlier release's record) is then taken for gone;
// DelChildByID finds one recorded with it. It refuses (error, nothing
// deleted) when expectMAC != "" and the link's MAC differs, or when the
// link is not an ipvlan or macvlan: it is not ours.
func DelChild(podNSPath, name, expectMAC string) error {
	if podNSPath == "" {
		return nil
	}
	h, gone, err := handleAtPath(podNSPath)
	if err != nil || gone {
		return err
	}
	defer h.Close()
	pl, err := h.LinkByName(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %q in the pod netns: %w", name, err)
	}
	if expectMAC != "" && !sameMAC(linkMAC(pl), expectMAC) {
		return fmt.Errorf("refusing to delete %q: MAC %s, expected %s", name, linkMAC(pl), normMAC(expectMAC))
	}
	if t := state.LinkKind(pl.Type()); t != state.LinkIPVlan && t != state.LinkMACVlan {
		return fmt.Errorf("refusing to delete %q: it is a %s, not an ipvlan or macvlan child", name, t)
	}
	if err := h.LinkDel(pl); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %q in the pod netns: %w", name, err)
	}
	return nil
}

// CheckInPod verifies that the netns at podNSPath has a link called name with
// MAC mac that is administratively up (CNI CHECK).
func CheckInPod(podNSPath, name, mac string) error {
	h, gone, err := handleAtPath(podNSPath)
	if err != nil {
		return err
	}
	if gone {
		return fmt.Errorf("check %q: pod netns %q does not exist", name, podNSPath)
	}
	defer h.Close()
	pl, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("check %q in the pod netns: %w", name, err)
	}
	if !sameMAC(linkMAC(pl), mac) {
		return fmt.Errorf("check %q: MAC %s, expected %s", name, linkMAC(pl), normMAC(mac))
	}
	if !isUp(pl) {
		return fmt.Errorf("check %q: interface is down", name)
	}
	return nil
}
