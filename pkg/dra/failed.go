package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// ReasonAttachFailed means the plugin's last ADD for the pod failed; the
// condition's message is its CNI error. A failed ADD leaves no record, so
// this comes from the plugin's outcome log.
const ReasonAttachFailed = "AttachFailed"

// maxFailedNamespaces bounds the claim lists one pass makes for failed
// pods: the outcome log is a file on disk, not trusted to be small.
const maxFailedNamespaces = 16

// failedADDs returns, by namespace/name, the pods that no record names
// (a record, even of a later sandbox, speaks for the pod) whose last
// failure in entries is an ADD and whose last entry is of that same
// sandbox: the failed ADD itself, or the runtime's DEL of the sandbox it
// failed, which comes before every retry. A later sandbox's entry means
// the pod moved on. entries are oldest first, as outcome.Read returns
// them (each pod's last entry and last failure). Entries whose pod is not
// a valid namespace/name are left out.
func failedADDs(entries []outcome.Entry, recs []*state.Record) map[podRef]outcome.Entry {
	lastAny, lastFail := map[podRef]outcome.Entry{}, map[podRef]outcome.Entry{}
	for _, e := range entries {
		p, ok := parsePod(e.Pod)
		if !ok {
			continue
		}
		lastAny[p] = e
		if e.Failed() {
			lastFail[p] = e
		}
	}
	for _, r := range recs {
		delete(lastFail, podRef{Namespace: r.Pod.Namespace, Name: r.Pod.Name})
	}
	for p, f := range lastFail {
		last := lastAny[p]
		if f.Verb != "ADD" || last.ContainerID != f.ContainerID || (last.Verb == "ADD" && !last.Failed()) {
			delete(lastFail, p)
		}
	}
	return lastFail
}

// podRef names a pod.
type podRef struct{ Namespace, Name string }

func (p podRef) String() string { return p.Namespace + "/" + p.Name }

// parsePod reads "namespace/name" as the plugin writes a pod into its
// outcome log.
func parsePod(s string) (podRef, bool) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return podRef{}, false
	}
	return podRef{Namespace: ns, Name: name}, true
}

// failureStatuses are the status.devices entries, by claim, of the devices
// of this driver's pool allocated to claims that reserve a pod of failed
// (by name, and by UID when the runtime gave the plugin one, so that a
// new pod of the same name is not shown its predecessor's failure):
// Ready False, reason AttachFailed, with the plugin's error. The claims
// are listed per namespace, a page at a time, those of the
// newest failures first, at most maxFailedNamespaces.
func (w *StatusWriter) failureStatuses(ctx context.Context, failed map[podRef]outcome.Entry) (map[claimRef][]deviceStatus, error) {
	out := map[claimRef][]deviceStatus{}
	for _, ns := range newestNamespaces(failed) {
		err := w.eachClaim(ctx, ns, func(claim *resourceapi.ResourceClaim) {
			for _, r := range reservingPods(claim) {
				e, ok := failed[podRef{Namespace: ns, Name: r.Name}]
				if !ok || (e.PodUID != "" && e.PodUID != string(r.UID)) {
					continue
				}
				ref := claimRef{Namespace: ns, Name: claim.Name}
				out[ref] = append(out[ref], w.failedDevices(claim, e)...)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// newestNamespaces are the namespaces of failed, that of the newest
// failure first, at most maxFailedNamespaces.
func newestNamespaces(failed map[podRef]outcome.Entry) []string {
	newest := map[string]time.Time{}
	for p, e := range failed {
		if t, ok := newest[p.Namespace]; !ok || e.Time.After(t) {
			newest[p.Namespace] = e.Time
		}
	}
	out := make([]string, 0, len(newest))
	for ns := range newest {
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool {
		if !newest[out[i]].Equal(newest[out[j]]) {
			return newest[out[i]].After(newest[out[j]])
		}
		return out[i] < out[j]
	})
	if len(out) > maxFailedNamespaces {
		out = out[:maxFailedNamespaces]
	}
	return out
}

// reservingPods are the pods claim is reserved for.
func reservingPods(claim *resourceapi.ResourceClaim) []resourceapi.ResourceClaimConsumerReference {
	var out []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, r)
		}
	}
	return out
}

// failedDevices are the entries of claim's devices of this driver and
// pool for the failed ADD e.
func (w *StatusWriter) failedDevices(claim *resourceapi.ResourceClaim, e outcome.Entry) []deviceStatus {
	return allocatedStatuses(claim, w.Pool, deviceStatus{Pod: e.Pod, Failed: true,
		Message: fmt.Sprintf("the rdma-chain CNI plugin's ADD for pod %s failed (CNI error %d): %s", e.Pod, e.Code, e.Msg)})
}

// allocatedStatuses are entries like tmpl, one for each of claim's
// devices of this driver and pool, sorted.
func allocatedStatuses(claim *resourceapi.ResourceClaim, pool string, tmpl deviceStatus) []deviceStatus {
	if claim.Status.Allocation == nil {
		return nil
	}
	var out []deviceStatus
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != pool {
			continue
		}
		d := tmpl
		d.Pool, d.Device, d.ShareID = r.Pool, r.Device, ""
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// withFailures adds to want the failure entries (a failed ADD, a refused
// configuration) of claims and devices nothing in want speaks for yet: a
// record, or failures added before.
func withFailures(want, failures map[claimRef][]deviceStatus) {
	for ref, devs := range failures {
		have := map[string]bool{}
		for _, d := range want[ref] {
			have[d.key()] = true
		}
		for _, d := range devs {
			if !have[d.key()] {
				want[ref] = append(want[ref], d)
				have[d.key()] = true
			}
		}
		sort.Slice(want[ref], func(i, j int) bool { return want[ref][i].key() < want[ref][j].key() })
	}
}
