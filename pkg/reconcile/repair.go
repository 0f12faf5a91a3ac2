package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
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
	r.metrics.Passes.WithLabelValues(metrics.TriggerEvent).Inc()
	for _, n := range r.networks() {
		recs, _ := state.New(n.DataDir).List() // unreadable ones are the interval pass's to report
		for _, rec := range recs {
			if rec.Network != n.Name {
				continue
			}
			if why, err := r.node.Stranded(rec); err == nil && why != "" {
				r.repairOne(n, rec, why, metrics.TriggerEvent, since)
			}
		}
	}
}

// repairOne restores rec as DEL would (under the node lock), logs and
// counts it.
func (r *reconciler) repairOne(n conflist.Network, rec *state.Record, why, trigger string, since time.Time) bool {
	if err := r.delRecord(n, rec); err != nil {
		r.metrics.RepairFailures.WithLabelValues(n.Name).Inc()
		r.log.Error("cannot repair an attachment", "attachment", describeRec(rec), "why", why, "error", err)
		return false
	}
	r.metrics.Repairs.WithLabelValues(n.Name, trigger).Inc()
	attrs := []any{"attachment", describeRec(rec), "why", why, "trigger", trigger}
	if trigger == metrics.TriggerEvent {
		d := time.Since(since)
		r.metrics.RepairSeconds.Observe(d.Seconds())
		attrs = append(attrs, "afterEvent", fmt.Sprintf("%.2fs", d.Seconds()))
	}
	r.log.Info("repaired an attachment", attrs...)
	return true
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
