package netdev

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// ErrUnproven matches (errors.Is) a DelChildByID that could not tell
// whether the child is gone: the caller must not give back what the child
// may still hold (its address).
var ErrUnproven = errors.New("cannot tell whether the child is gone")

// ChildID names a shared-mode child from the host netns: the host netns's
// nsid of the pod netns and the child's ifindex there. An nsid holds no
// reference to its netns: the kernel removes it when that netns dies and
// gives the number to the next netns that needs one.
type ChildID struct {
	NetnsID int32
	Index   int
}

// childIndexes is the range AddChild draws a child's ifindex from: far
// above the indexes a netns hands out by itself (each counts from 1), so
// that another pod's netns that got the nsid of a dead pod's has no link
// at that index (ipvlan children of one parent share its MAC, and their
// kind and name are the same in every pod).
const (
	childIndexMin   = 1 << 20
	childIndexRange = 1 << 30
)

// randomChildIndex draws an ifindex for a new child from childIndexes.
func randomChildIndex() int { return childIndexMin + rand.IntN(childIndexRange) } //nolint:gosec // a spread, not a secret

// drawChildIndex is the draw childLink makes: randomChildIndex, which the
// tests replace to force an ifindex already taken.
var drawChildIndex = randomChildIndex

// podNetnsID returns the nsid host (a handle on the host netns) has for
// the netns behind podFd, asking the kernel to allocate one when there is
// none (NETNSA_NSID -1: the lowest free id).
func podNetnsID(host *netlink.Handle, podFd int) (int32, error) {
	id, err := host.GetNetNsIdByFd(podFd)
	if err != nil {
		return 0, fmt.Errorf("read the host's nsid of the pod netns: %w", err)
	}
	if id < 0 {
		// EEXIST: another caller gave it one meanwhile; read it below.
		if err := host.SetNetNsIdByFd(podFd, -1); err != nil && !errors.Is(err, unix.EEXIST) {
			return 0, fmt.Errorf("give the pod netns an nsid in the host netns: %w", err)
		}
		if id, err = host.GetNetNsIdByFd(podFd); err != nil {
			return 0, fmt.Errorf("read the host's nsid of the pod netns: %w", err)
		}
	}
	if id < 0 || id > 1<<31-1 {
		return 0, fmt.Errorf("the host netns has no nsid for the pod netns (%d)", id)
	}
	return int32(id), nil
}

// DelChildByID deletes, from the calling thread's netns (the host), the
// child id names when it is still there and ours: an ipvlan or macvlan
// whose MAC is expectMAC (any MAC when expectMAC is ""). It returns nil
// when the child is proven gone: the nsid names no live netns (its netns
// died; an id given again names another netns, which has no link at the
// child's index, see childIndexes), that netns has no link at the index,
// or the link there is no ipvlan or macvlan. A child there with another
// MAC than expectMAC, and any other failure, wrap ErrUnproven.
func DelChildByID(id ChildID, expectMAC string) error {
	l, err := linkByID(id)
	switch {
	case errors.Is(err, unix.EINVAL), isNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("look up ifindex %d in the netns of nsid %d: %w (%w)", id.Index, id.NetnsID, ErrUnproven, err)
	}
	if t := state.LinkKind(l.Type()); t != state.LinkIPVlan && t != state.LinkMACVlan {
		return nil
	}
	if expectMAC != "" && !sameMAC(linkMAC(l), expectMAC) {
		// A child at the drawn index with another MAC: an ipvlan child
		// follows its parent's MAC (a bond's failover), a pod with
		// NET_ADMIN may set a macvlan's. Not proof that ours is gone.
		return fmt.Errorf("ifindex %d in the netns of nsid %d is a %s with MAC %s, recorded %s: %w",
			id.Index, id.NetnsID, l.Type(), linkMAC(l), normMAC(expectMAC), ErrUnproven)
	}
	err = execByID(unix.RTM_DELLINK, id, nil)
	if err != nil && !errors.Is(err, unix.EINVAL) && !isNotFound(err) {
		return fmt.Errorf("delete ifindex %d in the netns of nsid %d: %w (%w)", id.Index, id.NetnsID, ErrUnproven, err)
	}
	return nil
}

// linkByID is RTM_GETLINK of id.Index in the netns of id.NetnsID.
func linkByID(id ChildID) (netlink.Link, error) {
	var msgs [][]byte
	if err := execByID(unix.RTM_GETLINK, id, &msgs); err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("%d answers to one link's look-up", len(msgs))
	}
	return netlink.LinkDeserialize(nil, msgs[0])
}

// execByID sends msgType for ifindex id.Index with IFLA_TARGET_NETNSID
// id.NetnsID (the kernel runs it in the netns the caller's netns knows by
// that nsid; CAP_NET_ADMIN there), the answers into msgs when not nil.
// vishvananda/netlink's LinkByIndex and LinkDel cannot carry that
// attribute, so the request is built here with its nl package.
func execByID(msgType int, id ChildID, msgs *[][]byte) error {
	req := nl.NewNetlinkRequest(msgType, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(id.Index) //nolint:gosec // an ifindex the record holds, checked positive
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_TARGET_NETNSID, nl.Uint32Attr(uint32(id.NetnsID)))) //nolint:gosec // checked non-negative
	out, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if msgs != nil {
		*msgs = out
	}
	return err
}
