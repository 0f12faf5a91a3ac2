package chain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// del gives back what ADD took. It succeeds when there is nothing to give
// back: no state, an empty or vanished netns, a second DEL, an unreadable
// record (quarantined). A pod ADD passed through has no record: its DEL
// ends after one look, without the node lock.
func (p *Plugin) del(c *call) error {
	if found, err := c.store.Exists(c.key()); err == nil && !found {
		return nil
	}
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
		return p.releaseHost(c, rec, nsPath, nil)
	}
	unlock()
	return p.release(c, rec, nsPath)
}

// release gives back everything rec holds and forgets it: the IPAM leases
// without the node lock (an IPAM may be slow), then the host side under it.
// Progress is recorded, so a failed or killed release can be retried. When
// nsPath names no netns, the children come first (unpinnedChildren): one
// still alive holds its lease's address.
func (p *Plugin) release(c *call, rec *state.Record, nsPath string) error {
	if err := p.unpinnedChildren(c, rec, nsPath); err != nil {
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
	}
	copyLeaseProgress(cur, rec)
	return p.releaseHost(c, cur, nsPath, leaseErr)
}

// releaseHost gives back, under the node lock, the host side of cur (the
// record as it is on disk) and forgets it, or records the progress made
// when that or the lease release (leaseErr) failed.
func (p *Plugin) releaseHost(c *call, cur *state.Record, nsPath string, leaseErr error) error {
	hostErr := p.detachHost(c, cur, nsPath)
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

// copyLeaseProgress clears the lease flags in cur that released cleared in rec.
func copyLeaseProgress(cur, released *state.Record) {
	done := map[string]bool{}
	for _, l := range released.Links {
		if !l.IPAM {
			done[l.PodName] = true
		}
	}
	for i := range cur.Links {
		if done[cur.Links[i].PodName] {
			cur.Links[i].IPAM, cur.Links[i].IPs = false, nil
		}
	}
}

// unpinnedChildren deletes, when nsPath is empty or names no netns, the
// children rec holds leases for, from the host netns through their
// recorded nsid and ifindex, or proves them gone (netdev.DelChild): a
// netns path that is gone does not prove the netns dead, as a leaked
// process may hold it, and with it a child that has the pod's address.
// A child not proven gone fails the release with "try again" (11) before
// anything is given back; the record stays for a later DEL, GC or
// reconcile. A child without a recorded nsid (a record of an earlier
// release) is taken for gone, as before; so is one of an earlier boot,
// whose nsid may name a netns of this boot (see detachHost).
func (p *Plugin) unpinnedChildren(c *call, rec *state.Record, nsPath string) error {
	if rec.BootOf(p.bootID(c)) == state.BootEarlier {
		return nil
	}
	if nsPath != "" {
		if _, err := p.env.Netns.ID(nsPath); !errors.Is(err, netnsid.ErrGone) {
			return nil // there, or unreadable: the host side's DelChild decides
		}
	}
	for i := range rec.Links {
		l := &rec.Links[i]
		if !l.IPAM || l.PodNetnsID == nil || l.Step == state.StepPlanned || l.Step == state.StepReleased {
			continue
		}
		if err := p.delChild(l, ""); err != nil {
			return err
		}
		c.log.Info("child of a netns whose path is gone deleted or proven gone", "ifname", l.PodName, "nsid", *l.PodNetnsID)
	}
	return nil
}

// delChild deletes l's child (netdev.DelChild) from the netns at nsPath, or
// from the host netns through its recorded nsid when nsPath names none. A
// child not proven gone is a "try again" (11).
func (p *Plugin) delChild(l *state.Link, nsPath string) error {
	var id *netdev.ChildID
	if l.PodNetnsID != nil {
		id = &netdev.ChildID{NetnsID: *l.PodNetnsID, Index: l.PodIndex}
	}
	err := p.env.Links.DelChild(nsPath, l.PodName, l.MAC, id)
	if errors.Is(err, netdev.ErrUnproven) {
		return cniError(types.ErrTryAgainLater, "the pod's netns path is gone and its "+l.PodName+" may still hold its address; try again", err)
	}
	return err
}

// detachHost undoes the host side of an attachment in reverse order: the
// SMC-R entries, the device-info file, then each link. nsPath may be empty
// or gone. A link whose lease is still held stays recorded as released.
func (p *Plugin) detachHost(c *call, rec *state.Record, nsPath string) error {
	if rec.BootOf(p.bootID(c)) == state.BootEarlier {
		forgetEarlierBoot(c, rec)
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
			if err := p.detachLink(l, nsPath); err != nil {
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

func (p *Plugin) detachLink(l *state.Link, nsPath string) error {
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
		if err := p.detachSoftRoCE(l); err != nil {
			return err
		}
		if err := p.delChild(l, nsPath); err != nil {
			return err
		}
		failpoint.Hit("del-child-deleted")
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
	for _, rec := range stale {
		if err := p.release(c, rec, rec.NetNS); err != nil {
			errs = append(errs, fmt.Errorf("attachment %s/%s: %w", rec.ContainerID, rec.IfName, err))
			continue
		}
		c.log.Info("gc: released stale attachment", "holder", rec.ContainerID, "ifname", rec.IfName)
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
// ones the runtime no longer lists and the ones it keeps.
func (p *Plugin) staleRecords(c *call) (stale, kept []*state.Record, err error) {
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
			stale = append(stale, r)
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
