package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/cri"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// pass releases, for every network, the attachments whose pod is gone. It
// returns the number of problems (releases that failed, things it could
// not read).
func (r *reconciler) pass(ctx context.Context) int {
	r.metrics.Passes.WithLabelValues(metrics.TriggerInterval).Inc()
	live, err := r.liveSandboxes(ctx)
	if err != nil {
		r.metrics.CRIFailures.Inc()
		r.log.Warn("nothing released: the sandboxes are unknown", "error", err)
		return 1
	}
	problems, released, kept, listFailed := 0, 0, 0, false
	listed, seen := map[state.Key]bool{}, map[state.Key]bool{}
	reason := metrics.ReasonNetnsGone
	if live != nil {
		reason = metrics.ReasonSandboxGone
	}
	for _, n := range r.networks() {
		if !r.ipamVisible(n) {
			problems++
		}
		// Records are written atomically: reading them needs no lock, and
		// DEL takes the node lock before it releases anything.
		recs, err := state.New(n.DataDir).List()
		if err != nil {
			r.log.Error("cannot list the attachments", "dataDir", n.DataDir, "error", err)
			problems++
			listFailed = true
		}
		r.countStranded(n.Name, recs)
		for _, rec := range recs {
			if rec.Network != n.Name {
				continue
			}
			seen[rec.Key()] = true
			why, p := r.stale(rec, live)
			problems += p
			recReason := reason
			if why == "" && p == 0 {
				// The safety net of the event-driven repair.
				if sw, err := r.node.Stranded(rec); err == nil && sw != "" {
					if r.repairOne(n, rec, sw, metrics.TriggerInterval, time.Time{}) {
						released++
					} else {
						problems++
					}
					continue
				}
				if sandboxState, ok := live[rec.ContainerID]; ok {
					listed[rec.Key()] = true
					why, recReason, p = r.goneWhileListed(rec, sandboxState)
					problems += p
				}
			}
			if why == "" {
				kept++
				continue
			}
			if r.release(n, rec, why, recReason) {
				released++
			} else {
				problems++
			}
		}
	}
	if !listFailed { // records it did not list may still be there
		r.forgetUnseen(listed)
		r.forgetReleaseErrs(seen)
	}
	r.log.Info("pass done", "released", released, "kept", kept, "problems", problems, "liveness", r.liveness())
	return problems
}

// countStranded sets the stranded gauge of network to the records of it
// an ADD marked stranded (state.Record.StrandedAt) that still hold a
// device.
func (r *reconciler) countStranded(network string, recs []*state.Record) {
	n := 0
	for _, rec := range recs {
		if rec.Network == network && !rec.StrandedAt.IsZero() && chain.HoldsDevice(rec) {
			n++
		}
	}
	r.metrics.Stranded.WithLabelValues(network).Set(float64(n))
}

func (r *reconciler) liveness() string {
	if r.criSocket != "" {
		return "CRI " + r.criSocket
	}
	return "netns"
}

// liveSandboxes is the state (cri.StateReady, cri.StateNotReady) of every
// sandbox the runtime lists, by ID, or nil without a CRI socket.
func (r *reconciler) liveSandboxes(ctx context.Context) (map[string]int32, error) {
	if r.criSocket == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	list, err := r.node.Sandboxes(ctx, r.criSocket)
	r.cri.observe(r.node.Now(), err)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		// A node that runs this command under Kubernetes has at least its
		// own pod: an empty list means the wrong runtime, not a clean node.
		return nil, fmt.Errorf("the runtime at %s lists no pod sandbox at all (is it the runtime that runs this network?)", r.criSocket)
	}
	live := make(map[string]int32, len(list))
	for _, s := range list {
		live[s.ID] = s.State
	}
	return live, nil
}

// stale says why rec's pod is gone, or "" to keep it, and counts a problem
// when it cannot tell.
func (r *reconciler) stale(rec *state.Record, live map[string]int32) (string, int) {
	if live != nil {
		if _, listed := live[rec.ContainerID]; listed {
			return "", 0
		}
		if age := r.node.Now().Sub(rec.CreatedAt); age < r.minAge {
			r.log.Info("kept an attachment CRI does not list: too young", "attachment", describeRec(rec), "age", age.Round(time.Second))
			return "", 0
		}
		return "sandbox not listed by CRI", 0
	}
	if rec.NetNS == "" {
		r.log.Warn("kept an attachment: no netns recorded, liveness unknown without --cri-socket", "attachment", describeRec(rec))
		return "", 1
	}
	gone, err := r.node.NetnsGone(rec)
	if err != nil {
		r.log.Warn("kept an attachment", "attachment", describeRec(rec), "error", err)
		return "", 1
	}
	if gone {
		return "netns " + rec.NetNS + " is gone", 0
	}
	return "", 0
}

// ipamVisible reports whether n's host-local leases are under the
// directory this process sees the node's leases in, and logs why not.
func (r *reconciler) ipamVisible(n conflist.Network) bool {
	if r.ipamUnder == "" || n.IPAMDataDir == "" {
		return true
	}
	rel, err := filepath.Rel(r.ipamUnder, n.IPAMDataDir)
	if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return true
	}
	r.log.Error("the network's host-local IPAM keeps leases outside the node's directory this reconcile sees: "+
		"the leases of the pods it releases would stay on the node (keep ipam.dataDir under it, or mount its directory)",
		"network", n.Name, "ipamDataDir", n.IPAMDataDir, "seen", r.ipamUnder)
	return false
}

// goneWhileListed says why an attachment whose sandbox CRI still lists is
// released anyway, with the release's reason label, and counts a problem
// when it cannot tell. Nothing of such a pod can serve it any more, and
// what it holds must not wait for a DEL that may come late or never: its
// IPAM lease, and its netns inode listed in the node-wide SMC socket hook.
// The runtime's DEL, when it comes, finds no record and succeeds.
//
// Two proofs release. The netns path opens on another netns than ADD
// recorded (another inode, or the same inode with another cookie), as when
// the pod died while kubelet or the runtime was down and the path was
// pinned again: reason netns_gone. Or the runtime itself says the sandbox
// is not ready (its pause is dead; kubelet makes a new sandbox) and the
// path names no netns here: reason sandbox_not_ready. An attachment
// younger than the minimum age is kept then, as its sandbox may still be
// starting, and so is an exclusive-mode one that holds a device: the
// repair (Stranded) releases it once the kernel shows the device back,
// which the netns's death alone does not yet prove.
//
// A path that names no netns here is no proof while the runtime says the
// sandbox is ready: this process's mount view is not the runtime's (a
// netns kept under the runtime's own state directory, a /proc/PID/ns/net
// path, a mount without propagation that shows a new pin as an empty
// file). It keeps the attachment, counted as a problem of every pass and
// said once (see unseen), as does a path that cannot be read. "" keeps it.
func (r *reconciler) goneWhileListed(rec *state.Record, sandboxState int32) (why, reason string, problems int) {
	replaced, err := r.node.NetnsReplaced(rec)
	switch {
	case err == nil:
		r.forgetOne(rec.Key())
		if replaced {
			return "netns " + rec.NetNS + " names another netns while CRI still lists the sandbox", metrics.ReasonNetnsGone, 0
		}
		return "", "", 0
	case sandboxState == cri.StateNotReady && errors.Is(err, netnsid.ErrGone) && chain.HoldsDevice(rec):
		// The kernel gives an exclusive-mode device back when the netns
		// dies; the repair releases the attachment then.
		r.forgetOne(rec.Key())
		r.log.Info("kept an attachment CRI lists not ready: its netns is gone, its device not back yet (the repair gives it back then)",
			"attachment", describeRec(rec))
		return "", "", 0
	case sandboxState == cri.StateNotReady && errors.Is(err, netnsid.ErrGone):
		if age := r.node.Now().Sub(rec.CreatedAt); age < r.minAge {
			r.log.Info("kept an attachment CRI lists not ready: too young", "attachment", describeRec(rec), "age", age.Round(time.Second))
			return "", "", 0
		}
		r.forgetOne(rec.Key())
		return "netns " + rec.NetNS + " is gone while CRI still lists the sandbox, not ready", metrics.ReasonSandboxNotReady, 0
	}
	r.unseen(rec, err)
	return "", "", 1
}

// unseen says, once per attachment and reason, that an attachment CRI
// lists is kept because nothing here proves its pod dead, and counts it.
func (r *reconciler) unseen(rec *state.Record, err error) {
	reason := metrics.UnverifiedNetnsUnreadable
	if errors.Is(err, netnsid.ErrGone) {
		reason = metrics.UnverifiedNetnsUnseen
	}
	if r.unverified == nil {
		r.unverified = map[state.Key]string{}
	}
	if r.unverified[rec.Key()] == reason {
		return
	}
	r.unverified[rec.Key()] = reason
	r.metrics.Unverified.WithLabelValues(rec.Network, reason).Inc()
	r.log.Warn("kept an attachment CRI lists: its netns cannot be read here, and nothing proves its pod dead "+
		"(said once; counted as a problem of every pass while it lasts)",
		"attachment", describeRec(rec), "netns", rec.NetNS, "reason", reason, "error", err)
}

// forgetOne forgets that key's netns could not be read.
func (r *reconciler) forgetOne(key state.Key) { delete(r.unverified, key) }

// forgetUnseen forgets the attachments no longer kept unverified because
// CRI no longer lists them or their record is gone. Only a pass that
// listed every network's records calls it: a record a failed listing left
// out is not gone.
func (r *reconciler) forgetUnseen(listed map[state.Key]bool) {
	for key := range r.unverified {
		if !listed[key] {
			delete(r.unverified, key)
		}
	}
}

// release runs the plugin's own DEL for the attachment, as the runtime
// would: under the node lock, devices and netdevs back, children deleted,
// IPAM leases and SMC-R pnet entries released, then the record removed.
func (r *reconciler) release(n conflist.Network, rec *state.Record, why, reason string) bool {
	if err := r.delRecord(n, rec); err != nil {
		r.metrics.ReleaseFailures.WithLabelValues(n.Name).Inc()
		r.releaseFailed(rec, why, err)
		return false
	}
	delete(r.releaseErrs, rec.Key())
	r.metrics.Releases.WithLabelValues(n.Name, reason).Inc()
	r.log.Info("released an attachment", "attachment", describeRec(rec), "why", why)
	return true
}

// releaseFailed says that rec's release failed: at ERROR the first time
// and whenever the error changes, at DEBUG while it repeats (each pass
// retries, counts a problem and the failure metric).
func (r *reconciler) releaseFailed(rec *state.Record, why string, err error) {
	attrs := []any{"attachment", describeRec(rec), "why", why, "error", err}
	if r.releaseErrs[rec.Key()] == err.Error() {
		r.log.Debug("still cannot release an attachment", attrs...)
		return
	}
	if r.releaseErrs == nil {
		r.releaseErrs = map[state.Key]string{}
	}
	r.releaseErrs[rec.Key()] = err.Error()
	r.log.Error("cannot release an attachment", attrs...)
}

// forgetReleaseErrs forgets the failed releases of records the pass did
// not see (released since, by the runtime's DEL or by hand). Only a pass
// that listed every network's records calls it: a record a failed listing
// left out is not gone, and its failure, said again, would be an ERROR
// again.
func (r *reconciler) forgetReleaseErrs(seen map[state.Key]bool) {
	for key := range r.releaseErrs {
		if !seen[key] {
			delete(r.releaseErrs, key)
		}
	}
}

// delRecord runs the plugin's DEL for rec's attachment.
func (r *reconciler) delRecord(n conflist.Network, rec *state.Record) error {
	return r.node.Del(&skel.CmdArgs{
		ContainerID: rec.ContainerID,
		IfName:      rec.IfName,
		Args:        podArgs(rec.Pod),
		Path:        r.cniPath,
		StdinData:   n.Stdin,
	})
}

func describeRec(rec *state.Record) string {
	s := fmt.Sprintf("%s/%s/%s", rec.Network, rec.ContainerID, rec.IfName)
	if rec.Pod.Name != "" {
		s += fmt.Sprintf(" (pod %s/%s", rec.Pod.Namespace, rec.Pod.Name)
	} else {
		s += " (pod unknown"
	}
	s += ", " + rec.ModeName()
	for _, l := range rec.Links {
		s += fmt.Sprintf(", %s %s", l.Kind, l.Device)
		if l.PodName != "" {
			s += " as " + l.PodName
		}
	}
	if rec.SMC != nil {
		s += ", SMC-R " + rec.SMC.PnetID
	}
	return s + ")"
}
