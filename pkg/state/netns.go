package state

import (
	"errors"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
)

// NetnsGone reports whether the record's pod netns no longer exists: the
// path names no netns, or one with another inode or cookie than ADD
// recorded (the kernel reuses inode numbers, never cookies). It is the one
// answer for ADD's reclaim, repair, inspect, metrics and reconcile; idOf
// identifies the netns at a path (netnsid.Of on the kernel). A record
// without a netns is not gone; on an error the caller keeps the
// attachment.
func (r *Record) NetnsGone(idOf func(path string) (netnsid.ID, error)) (bool, error) {
	if r.NetNS == "" {
		return false, nil
	}
	id, err := idOf(r.NetNS)
	switch {
	case errors.Is(err, netnsid.ErrGone):
		return true, nil
	case id.Inode == 0:
		return false, err
	case r.NetNSIno != 0 && id.Inode != r.NetNSIno:
		return true, nil
	case r.NetNSCookie == 0:
		return false, nil
	case err != nil:
		return false, err
	}
	return id.Cookie != r.NetNSCookie, nil
}

// NetnsReplaced reports whether the record's netns path now names another
// netns than ADD recorded (another inode, or the same inode with another
// cookie): positive proof, in any mount view, that the path no longer
// names the pod's netns. A path that names no netns here is an error
// wrapping netnsid.ErrGone, not proof: a mount this process lacks, or one
// without propagation that shows a new pin as an empty file, looks the
// same as a deleted pin. A record without a netns is not replaced, nor is
// one without its identity whose path names a netns (nothing to compare).
func (r *Record) NetnsReplaced(idOf func(path string) (netnsid.ID, error)) (bool, error) {
	if r.NetNS == "" {
		return false, nil
	}
	id, err := idOf(r.NetNS)
	switch {
	case id.Inode == 0:
		return false, err
	case r.NetNSIno == 0:
		return false, nil
	case id.Inode != r.NetNSIno:
		return true, nil
	case r.NetNSCookie == 0 || err != nil:
		return false, err
	}
	return id.Cookie != r.NetNSCookie, nil
}
