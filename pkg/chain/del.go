package chain

import (
	"errors"
	"fmt"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// del gives back what ADD took. It succeeds when there is nothing to give
// back: no state, an empty or vanished netns, a second DEL.
func (p *Plugin) del(c *call) error {
	rec, unlock, err := p.lockedRecord(c)
	if err != nil || rec == nil {
		return err
	}
	defer unlock()
	nsPath := c.args.Netns
	if nsPath == "" {
		nsPath = rec.NetNS
	}
	if err := p.detach(c, rec, nsPath); err != nil {
		if errors.Is(err, errLeaseRelease) {
			return cniError(CodeIPAM, "cannot release the pod's IPAM leases", err)
		}
		return cniError(CodeLinkSetup, "cannot give back the pod's RDMA links", err)
	}
	if err := c.store.Delete(c.key()); err != nil {
		return cniError(CodeState, "cannot remove attachment state", err)
	}
	return nil
}

// lockedRecord takes the node lock and reads the call's record. It returns a
// nil record (and no lock held) when there is none.
func (p *Plugin) lockedRecord(c *call) (*state.Record, func(), error) {
	unlock, err := c.store.Lock()
	if err != nil {
		return nil, nil, cniError(CodeState, "cannot lock attachment state", err)
	}
	rec, err := c.store.Get(c.key())
	if err != nil {
		unlock()
		if errors.Is(err, state.ErrNotFound) {
			return nil, nil, nil
		}
		return nil, nil, cniError(CodeState, "cannot read attachment state", err)
	}
	return rec, unlock, nil
}

// gc undoes and forgets every attachment of this network that the runtime
// no longer lists as valid.
func (p *Plugin) gc(c *call) error {
	unlock, err := c.store.Lock()
	if err != nil {
		return cniError(CodeState, "cannot lock attachment state", err)
	}
	defer unlock()
	recs, listErr := c.store.List()
	valid := map[state.Key]bool{}
	for _, a := range c.conf.ValidAttachments() {
		valid[state.Key{Network: c.conf.Name, ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	var errs []error
	if listErr != nil {
		errs = append(errs, listErr)
	}
	for _, listed := range recs {
		if listed.Network != c.conf.Name || valid[listed.Key()] {
			continue
		}
		// Read again: releasing an earlier record may have handed this one
		// the ownership of a shared SMC-R entry.
		rec, err := c.store.Get(listed.Key())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.detach(c, rec, rec.NetNS); err != nil {
			errs = append(errs, fmt.Errorf("attachment %s/%s: %w", rec.ContainerID, rec.IfName, err))
			continue
		}
		if err := c.store.Delete(rec.Key()); err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("gc: released stale attachment", "container", rec.ContainerID, "ifname", rec.IfName)
	}
	if err := p.gcLeases(c, keptRecords(recs, c.conf.Name, valid)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cniError(CodeState, "gc could not release every stale attachment", err)
	}
	return nil
}

// keptRecords are the network's records GC keeps.
func keptRecords(recs []*state.Record, network string, valid map[state.Key]bool) []*state.Record {
	var out []*state.Record
	for _, r := range recs {
		if r.Network == network && valid[r.Key()] {
			out = append(out, r)
		}
	}
	return out
}
