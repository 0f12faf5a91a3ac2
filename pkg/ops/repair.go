package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// repair runs on kernel events (a link appeared in the host netns, an RDMA
// device registered or changed): it gives back, through the plugin's own
// DEL, every exclusive-mode attachment whose pod netns died and whose
// device the kernel refunded, so that the NIC is back under its host name
// with its addresses within seconds, not at the next --interval pass. It
// neither asks CRI nor touches anything else: the kernel has already said
// the pod is gone.
func (r *reconciler) repair(since time.Time) {
	r.metrics.passes.WithLabelValues(triggerEvent).Inc()
	for _, n := range r.networks() {
		recs, _ := state.New(n.dataDir).List() // unreadable ones are the interval pass's to report
		for _, rec := range recs {
			if rec.Network != n.name {
				continue
			}
			if why, err := r.node.Stranded(rec); err == nil && why != "" {
				r.repairOne(n, rec, why, triggerEvent, since)
			}
		}
	}
}

// repairOne restores rec as DEL would (under the node lock), logs and
// counts it.
func (r *reconciler) repairOne(n network, rec *state.Record, why, trigger string, since time.Time) bool {
	if err := r.delRecord(n, rec); err != nil {
		r.metrics.repairFailures.WithLabelValues(n.name).Inc()
		say(r.out, "reconcile: FAILED to repair %s (%s): %v\n", describeRec(rec), why, err)
		return false
	}
	r.metrics.repairs.WithLabelValues(n.name, trigger).Inc()
	after := ""
	if trigger == triggerEvent {
		d := time.Since(since)
		r.metrics.repairSeconds.Observe(d.Seconds())
		after = fmt.Sprintf(" (%.2fs after the event)", d.Seconds())
	}
	say(r.out, "reconcile: repaired %s: %s%s\n", describeRec(rec), why, after)
	return true
}

// Stranded says why rec is a stranded exclusive-mode attachment: it
// holds a device, its pod netns is gone (as ADD's reclaim decides: the
// path, its inode, its cookie) and the kernel shows a refunded device in
// this netns (the RDMA device, or a netdev with the moved NIC's MAC). Both
// must hold: a netns path this process cannot see (a mount it lacks) never
// releases a live pod, since that pod's device is not back.
func (k kernelNode) Stranded(rec *state.Record) (string, error) {
	if !chain.HoldsDevice(rec) {
		return "", nil
	}
	gone, err := chain.NetnsGone(k.env, rec)
	if err != nil || !gone {
		return "", err
	}
	var links []netlink.Link
	for _, l := range rec.Links {
		if l.Kind != "moved" {
			continue
		}
		if _, err := netlink.RdmaLinkByName(l.Device); err == nil {
			return fmt.Sprintf("netns %s is gone and RDMA device %s is back on the host", rec.NetNS, l.Device), nil
		}
		if l.MAC == "" {
			continue
		}
		if links == nil {
			if links, err = netlink.LinkList(); err != nil {
				return "", err
			}
		}
		for _, hl := range links {
			if strings.EqualFold(hl.Attrs().HardwareAddr.String(), l.MAC) {
				return fmt.Sprintf("netns %s is gone and its NIC %s is back on the host as %s", rec.NetNS, l.MAC, hl.Attrs().Name), nil
			}
		}
	}
	return "", nil
}

// waitEvents runs repair for every event until ctx ends; events arriving
// during a repair make one more (the channel holds one).
func (r *reconciler) waitEvents(ctx context.Context, events <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-events:
			r.mu.Lock() // never at the same time as an interval pass
			r.repair(at)
			r.mu.Unlock()
		}
	}
}
