package chain

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// reclaimStranded gives back, under the node lock, the devices of
// exclusive-mode attachments whose pod netns is gone (the path no longer
// names a netns, or names another one than ADD recorded) and whose RDMA
// device the kernel has given back to this netns (host lists all the
// host's devices once the first candidate needs them). Without this, a
// pod whose DEL never comes (a runtime that lost the sandbox, a 0.4.0
// chain that never sends GC) would hold its device forever. The host side
// is restored as DEL would; a record whose IPAM leases remain is kept,
// marked released, and returned in pending with its key lock still held:
// finishReclaim releases them once the node lock is given up. An
// attachment whose own call holds its key lock is left to that call.
//
// A device the kernel has not given back yet is waited for (releaseHost's
// bounded wait) only the first time an ADD finds it stranded, and by one
// attachment per ADD: a wait that failed before is never held under the
// lock again (a process that keeps the netns alive without its path keeps
// the device). Such a device stays held, reported once (StrandedAt); a
// later ADD reclaims it once the kernel has given it back, and the
// reconcile daemon does on the kernel's event.
func (p *Plugin) reclaimStranded(c *call, recs []*state.Record) (out []*state.Record, pending []heldRecord) {
	host := sync.OnceValues(p.env.RDMA.Devices)
	waited := false
	for _, r := range recs {
		out = append(out, r)
		if r.Mode != rdma.ModeExclusive || !holdsDevice(r) || !p.netnsGone(c, r) {
			continue
		}
		if back, err := refunded(r, host); err != nil || !back {
			if !r.StrandedAt.IsZero() || waited {
				p.strandedHeld(c, r, cmp.Or(err, errors.New("its device is not back")))
				continue
			}
			waited = true
		}
		h, ok, err := c.holdKey(r)
		if err != nil {
			c.log.Error("cannot reclaim the RDMA devices of a pod whose netns is gone", "holder", r.ContainerID, "error", err)
		}
		if !ok {
			continue
		}
		if p.reclaim(c, r) {
			pending = append(pending, h)
		} else {
			h.unlock()
		}
	}
	return out, pending
}

// reclaim restores r's host side and drops or marks its record; it
// reports whether r's leases are still to release.
func (p *Plugin) reclaim(c *call, r *state.Record) bool {
	if err := p.releaseHost(c, r, r.NetNS); err != nil {
		c.log.Error("cannot reclaim the RDMA devices of a pod whose netns is gone", "holder", r.ContainerID, "netns", r.NetNS, "error", err)
		p.strandedHeld(c, r, err)
		_ = c.store.Put(r) // keep the progress made
		return false
	}
	failpoint.Hit("add-stranded-reclaimed")
	c.log.Warn("reclaimed RDMA devices from a pod whose netns is gone (no DEL came for it)",
		"holder", r.ContainerID, "pod", r.Pod.Namespace+"/"+r.Pod.Name, "netns", r.NetNS)
	if len(r.Links) == 0 && r.SMC == nil {
		if err := c.store.Delete(r.Key()); err != nil {
			c.log.Error("cannot drop the record of a reclaimed attachment", "holder", r.ContainerID, "error", err)
		}
		return false
	}
	if err := c.store.Put(r); err != nil {
		c.log.Error("cannot record a reclaimed attachment", "holder", r.ContainerID, "error", err)
		return false
	}
	return true
}

// refunded reports whether every RDMA device r moved and still holds is
// in host (the kernel gave it back when the netns died).
func refunded(r *state.Record, host func() ([]rdma.Device, error)) (bool, error) {
	devs, err := host()
	if err != nil {
		return false, err
	}
	for _, l := range r.Links {
		if l.Kind != state.LinkMoved || l.Step == state.StepReleased {
			continue
		}
		if !slices.ContainsFunc(devs, func(d rdma.Device) bool { return d.Name == l.Device }) {
			return false, nil
		}
	}
	return true, nil
}

// strandedHeld marks and reports, once per attachment (StrandedAt on its
// record), that its pod netns is gone while the kernel keeps its RDMA
// device there: the device stays held and is not offered, and no ADD waits
// for it again.
func (p *Plugin) strandedHeld(c *call, r *state.Record, why error) {
	if !r.StrandedAt.IsZero() {
		return
	}
	r.StrandedAt = time.Now().UTC()
	if err := c.store.Put(r); err != nil {
		c.log.Error("cannot record a stranded attachment", "holder", r.ContainerID, "error", err)
	}
	c.log.Warn("a pod's netns path is gone but the kernel has not given its RDMA device back (a process may hold the netns): "+
		"the device stays held and no ADD waits for it again; an ADD or the reconcile daemon gives it back once the kernel has (said once)",
		"holder", r.ContainerID, "pod", r.Pod.Namespace+"/"+r.Pod.Name, "netns", r.NetNS, "why", why)
}

func holdsDevice(r *state.Record) bool {
	for _, l := range r.Links {
		if l.Kind == state.LinkMoved && l.Step != state.StepReleased {
			return true
		}
	}
	return false
}

// netnsGone reports whether r's pod netns no longer exists (see
// state.Record.NetnsGone). An error while looking counts as alive: a
// device is never taken from a live pod.
func (p *Plugin) netnsGone(c *call, r *state.Record) bool {
	gone, err := r.NetnsGone(p.env.Netns.ID)
	if err != nil {
		c.log.Warn("cannot tell whether a holder's netns is alive: keeping it", "holder", r.ContainerID, "netns", r.NetNS, "error", err)
	}
	return gone
}

// HoldsDevice reports whether r is an exclusive-mode attachment that still
// holds a moved netdev or RDMA device.
func HoldsDevice(r *state.Record) bool {
	return r.Mode == rdma.ModeExclusive && holdsDevice(r)
}

// finishReclaim releases, without the node lock, the leases of the
// attachments reclaimStranded gave back (pending), forgets them, and lets
// their key locks go. A failure leaves the record for the pod's DEL or GC.
func (p *Plugin) finishReclaim(c *call, pending []heldRecord) {
	for _, h := range pending {
		if err := p.release(c, h.Record, h.NetNS); err != nil {
			c.log.Error("cannot release the leases of a reclaimed attachment", "holder", h.ContainerID, "error", err)
		}
		h.unlock()
	}
}
