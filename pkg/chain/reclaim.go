package chain

import (
	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// reclaimStranded gives back, under the node lock, the devices of
// exclusive-mode attachments whose pod netns is gone: the path no longer
// names a netns, or names another one than ADD recorded. The kernel has
// already returned their RDMA devices and physical netdevs to init_net (a
// netdev possibly as devN); without this, a pod whose DEL never comes (a
// runtime that lost the sandbox, a 0.4.0 chain that never sends GC) would
// hold its device forever. The host side is restored as DEL would; a
// record whose IPAM leases remain is kept, marked released, and returned
// in pending: finishReclaim releases them once the lock is given up.
func (p *Plugin) reclaimStranded(c *call, recs []*state.Record) (out, pending []*state.Record) {
	for _, r := range recs {
		if r.Mode != rdma.ModeExclusive || !holdsDevice(r) || !p.netnsGone(c, r) {
			out = append(out, r)
			continue
		}
		if err := p.detachHost(c, r, r.NetNS); err != nil {
			c.log.Error("cannot reclaim the RDMA devices of a pod whose netns is gone", "holder", r.ContainerID, "netns", r.NetNS, "error", err)
			_ = c.store.Put(r) // keep the progress made
			out = append(out, r)
			continue
		}
		failpoint.Hit("add-stranded-reclaimed")
		if len(r.Links) == 0 && r.SMC == nil {
			if err := c.store.Delete(r.Key()); err != nil {
				c.log.Error("cannot drop the record of a reclaimed attachment", "holder", r.ContainerID, "error", err)
			}
		} else if err := c.store.Put(r); err != nil {
			c.log.Error("cannot record a reclaimed attachment", "holder", r.ContainerID, "error", err)
		} else {
			pending = append(pending, r)
		}
		c.log.Warn("reclaimed RDMA devices from a pod whose netns is gone (no DEL came for it)",
			"holder", r.ContainerID, "pod", r.Pod.Namespace+"/"+r.Pod.Name, "netns", r.NetNS)
		out = append(out, r)
	}
	return out, pending
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
// attachments reclaimStranded gave back (pending), and forgets them. A
// failure leaves the record for the pod's DEL or GC.
func (p *Plugin) finishReclaim(c *call, pending []*state.Record) {
	for _, r := range pending {
		if err := p.release(c, r, r.NetNS); err != nil {
			c.log.Error("cannot release the leases of a reclaimed attachment", "holder", r.ContainerID, "error", err)
		}
	}
}
