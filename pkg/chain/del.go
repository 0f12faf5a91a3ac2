package chain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// del gives back what ADD took. It succeeds when there is nothing to give
// back: no state, an empty or vanished netns, a second DEL, an unreadable
// record (quarantined). A pod ADD passed through has no record: its DEL
// ends after one look, without the node lock, unless an ADD of the same
// attachment is under way. Otherwise it holds the attachment's key lock
// throughout (lockKey).
func (p *Plugin) del(c *call) error {
	if found, err := c.store.Exists(c.key()); err == nil && !found {
		held, err := c.store.DropKeyLock(c.key())
		if err != nil {
			c.log.Warn("cannot remove the key lock of an attachment without a record", "error", err)
		}
		if !held {
			return nil
		}
		// An ADD of the attachment is under way and has not recorded it
		// yet: wait for it, then release what it recorded.
	}
	unlockKey, err := c.lockKey()
	if err != nil {
		return err
	}
	defer unlockKey()
	rec, unlock, err := p.lockedRecord(c, true)
	if errors.Is(err, errQuarantined) {
		return p.releaseInferredLeases(c)
	}
	if err != nil || rec == nil {
		return err
	}
	nsPath := c.args.Netns
	if nsPath == "" {
		nsPath = rec.NetNS
	}
	if !holdsLease(rec) {
		// Nothing to do without the lock: give back the host side under
		// the lock already held, from the record just read under it.
		defer unlock()
		if err := p.childrenByID(c, rec); err != nil {
			return err
		}
		return p.finishRelease(c, rec, nsPath, nil)
	}
	unlock()
	return p.release(c, rec, nsPath)
}

// release gives back everything rec holds and forgets it: the IPAM leases
// without the node lock (an IPAM may be slow), then the host side under it.
// Progress is recorded, so a failed or killed release can be retried. The
// children recorded with their nsid come first (childrenByID): one still
// alive holds its lease's address.
func (p *Plugin) release(c *call, rec *state.Record, nsPath string) error {
	if err := p.childrenByID(c, rec); err != nil {
		return err
	}
	leaseErr := p.releaseLeases(c, rec)
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := c.store.Get(rec.Key())
	switch {
	case errors.Is(err, state.ErrNotFound):
		return leaseError(leaseErr) // released meanwhile (GC)
	case errors.Is(err, state.ErrCorrupt):
		p.quarantine(c, err)
		return leaseError(leaseErr)
	case err != nil:
		return cniError(CodeState, "cannot read attachment state", err)
	case !cur.CreatedAt.Equal(rec.CreatedAt):
		// Released meanwhile and recorded again by another ADD of the
		// same container and interface: that record is not this
		// release's to give back or to mark.
		c.log.Info("attachment released meanwhile and recorded again by another ADD: left to that record",
			"ifname", rec.IfName, "createdAt", rec.CreatedAt, "now", cur.CreatedAt)
		return leaseError(leaseErr)
	}
	copyProgress(cur, rec)
	return p.finishRelease(c, cur, nsPath, leaseErr)
}

// finishRelease gives back, under the node lock, the host side of cur (the
// record as it is on disk) and forgets it, or records the progress made
// when that or the lease release (leaseErr) failed.
func (p *Plugin) finishRelease(c *call, cur *state.Record, nsPath string, leaseErr error) error {
	hostErr := p.releaseHost(c, cur, nsPath)
	if leaseErr != nil || hostErr != nil {
		if serr := c.store.Put(cur); serr != nil {
			c.log.Error("cannot record DEL progress", "error", serr)
		}
		if hostErr != nil {
			return cniError(CodeLinkSetup, "cannot give back the pod's RDMA links", hostErr)
		}
		return leaseError(leaseErr)
	}
	if err := c.store.Delete(cur.Key()); err != nil {
		return cniError(CodeState, "cannot remove attachment state", err)
	}
	failpoint.Hit("del-record-deleted")
	return nil
}

func leaseError(err error) error {
	if err == nil {
		return nil
	}
	return cniError(CodeIPAM, "cannot release the pod's IPAM leases", err)
}

// copyProgress copies to cur (the record as it is on disk) what release
// gave back of rec without the node lock: the children childrenByID
// released (and their rxe devices), the leases releaseLeases released.
func copyProgress(cur, released *state.Record) {
	byName := map[string]*state.Link{}
	for i := range released.Links {
		byName[released.Links[i].PodName] = &released.Links[i]
	}
	for i := range cur.Links {
		l, ok := byName[cur.Links[i].PodName]
		if !ok {
			continue
		}
		if l.Step == state.StepReleased && recordedByID(l) {
			cur.Links[i].Step, cur.Links[i].SoftRoCE = state.StepReleased, false
		}
		if !l.IPAM {
			cur.Links[i].IPAM, cur.Links[i].IPs = false, nil
		}
	}
}

// childrenByID deletes every shared-mode child rec records with its nsid
// (its rxe device first), or proves it gone, through that nsid and its
// ifindex from the host netns (delChild), before any lease or host entry
// is given back. The netns path is not read for them: it may name no
// netns while a leaked process holds the pod's, with the child and its
// address; it may name another netns (a /proc/PID/ns/net whose PID was
// given again), whose ipvlan sibling has the child's name and MAC; it may
// not be readable. A child not proven gone fails the release with "try
// again" (11) before anything is given back; the record stays for a later
// DEL, GC or reconcile. A child given back is marked released, and the
// host side leaves it (releaseLink would take the same route). A child
// without a recorded nsid (a record of an earlier release) is left to the
// host side, by name; so is every child of an earlier boot, whose nsid
// may name a netns of this boot (releaseHost touches none).
func (p *Plugin) childrenByID(c *call, rec *state.Record) error {
	if rec.BootOf(p.bootID(c)) == state.BootEarlier {
		return nil
	}
	for i := range rec.Links {
		l := &rec.Links[i]
		if !recordedByID(l) || l.Step == state.StepPlanned || l.Step == state.StepReleased {
			continue
		}
		if err := p.releaseChild(l, ""); err != nil {
			return cniError(CodeLinkSetup, "cannot give back the pod's RDMA links", fmt.Errorf("give back %s (%s): %w", l.Device, l.PodName, err))
		}
		l.Step = state.StepReleased
		c.log.Debug("child deleted or proven gone through its nsid", "ifname", l.PodName, "nsid", *l.PodNetnsID, "ifindex", l.PodIndex)
	}
	return nil
}

// recordedByID reports whether l is a child recorded with the host's nsid
// of its pod netns and its ifindex there.
func recordedByID(l *state.Link) bool {
	return (l.Kind == state.LinkIPVlan || l.Kind == state.LinkMACVlan) && l.PodNetnsID != nil
}

// releaseChild deletes l's rxe device, if it made one, then its child
// (delChild).
func (p *Plugin) releaseChild(l *state.Link, nsPath string) error {
	if err := p.releaseSoftRoCE(l); err != nil {
		return err
	}
	if err := p.delChild(l, nsPath); err != nil {
		return err
	}
	failpoint.Hit("del-child-deleted")
	return nil
}

// delChild deletes l's child or proves it gone. One recorded with its
// nsid (recordedByID) is found from the host netns through that nsid and
// its ifindex (netdev.DelChildByID), whatever nsPath names; not proven
// gone, it is a "try again" (11). One recorded without it is deleted by
// name in the netns at nsPath (netdev.DelChild), taken for gone when
// nsPath names none.
func (p *Plugin) delChild(l *state.Link, nsPath string) error {
	if !recordedByID(l) {
		return p.env.Links.DelChild(nsPath, l.PodName, l.MAC)
	}
	err := p.env.Links.DelChildByID(netdev.ChildID{NetnsID: *l.PodNetnsID, Index: l.PodIndex}, l.MAC)
	if errors.Is(err, netdev.ErrUnproven) {
		return cniError(types.ErrTryAgainLater, "cannot prove the pod's "+l.PodName+" gone: it may still hold its address; try again", err)
	}
	return err
}

// releaseHost gives back the host side of an attachment in reverse order: the
// SMC-R entries, the device-info file, then each link. nsPath may be empty
// or gone. A link whose lease is still held stays recorded as released.
func (p *Plugin) releaseHost(c *call, rec *state.Record, nsPath string) error {
	if rec.BootOf(p.bootID(c)) == state.BootEarlier {
		releaseEarlierBootHost(c, rec)
		return nil
	}
	var errs []error
	if err := p.releaseSMC(c, rec, nsPath); err != nil {
		errs = append(errs, err)
	} else {
		failpoint.Hit("del-smc-released")
	}
	if rec.DeviceInfo != nil {
		removeDeviceInfo(c, rec.DeviceInfo)
		rec.DeviceInfo = nil
		failpoint.Hit("del-device-info-removed")
	}
	for i := len(rec.Links) - 1; i >= 0; i-- {
		l := &rec.Links[i]
		if l.Step != state.StepReleased {
			if err := p.releaseLink(l, nsPath); err != nil {
				errs = append(errs, fmt.Errorf("give back %s (%s): %w", l.Device, l.PodName, err))
				continue
			}
			l.Step = state.StepReleased
		}
		if !l.IPAM {
			rec.Links = slices.Delete(rec.Links, i, i+1)
		}
	}
	return errors.Join(errs...)
}

func (p *Plugin) releaseLink(l *state.Link, nsPath string) error {
	switch l.Kind {
	case state.LinkMoved:
		if l.RDMAMoved {
			if err := p.env.RDMA.ReturnToHost(l.Device, nsPath); err != nil {
				return err
			}
			l.RDMAMoved = false
			failpoint.Hit("del-rdma-returned")
		}
		if l.Step == state.StepPlanned || l.HostName == "" {
			return nil
		}
		err := p.env.Links.RestoreToHost(l.HostLink, nsPath)
		if errors.Is(err, netdev.ErrGone) {
			return nil
		}
		if err == nil {
			failpoint.Hit("del-netdev-restored")
		}
		return err
	case state.LinkIPVlan, state.LinkMACVlan:
		if l.Step == state.StepPlanned {
			return nil
		}
		return p.releaseChild(l, nsPath)
	}
	return nil
}

// gc undoes and forgets every attachment of this network that the runtime
// no longer lists as valid, then lets the IPAM drop leases nobody holds.
func (p *Plugin) gc(c *call) error {
	stale, kept, err := p.staleRecords(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range stale {
		err := p.release(c, h.Record, h.NetNS)
		h.unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("attachment %s/%s: %w", h.ContainerID, h.IfName, err))
			continue
		}
		c.log.Info("gc: released stale attachment", "holder", h.ContainerID, "ifname", h.IfName)
	}
	if err := p.gcLeases(c, kept); err != nil {
		errs = append(errs, cniError(CodeIPAM, "IPAM garbage collection failed", err))
	}
	if len(errs) == 0 {
		return nil
	}
	return types.NewError(firstCode(errs), "gc could not release every stale attachment", errors.Join(errs...).Error())
}

// staleRecords splits the network's records, under the node lock, into the
// ones the runtime no longer lists, each with its key lock held (holdKey:
// one whose own call holds it is left to that call), and the ones it
// keeps.
func (p *Plugin) staleRecords(c *call) (stale []heldRecord, kept []*state.Record, err error) {
	unlock, err := c.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	recs, err := p.listRecords(c)
	if err != nil {
		return nil, nil, err
	}
	valid := map[state.Key]bool{}
	for _, a := range c.conf.ValidAttachments() {
		valid[state.Key{Network: c.conf.Name, ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	for _, r := range recs {
		switch {
		case r.Network != c.conf.Name:
		case p.impossible(c, r):
		case valid[r.Key()]:
			kept = append(kept, r)
		default:
			h, ok, err := c.holdKey(r)
			if err != nil {
				for _, h := range stale {
					h.unlock()
				}
				return nil, nil, cniError(CodeState, "cannot lock a stale attachment", err)
			}
			if ok {
				stale = append(stale, h)
			}
		}
	}
	return stale, kept, nil
}

// firstCode is the CNI code of the first error that carries one.
func firstCode(errs []error) uint {
	for _, err := range errs {
		var te *types.Error
		if errors.As(err, &te) {
			return te.Code
		}
	}
	return CodeState
}
