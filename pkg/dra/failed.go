package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// ReasonAttachFailed: the plugin's last ADD for the pod failed; the
// condition's message is its CNI error. A failed ADD leaves no record, so
// this comes from the plugin's outcome log.
const ReasonAttachFailed = "AttachFailed"

// maxFailedNamespaces bounds the claim lists one pass makes for failed
// pods: the outcome log is a file on disk, not trusted to be small.
const maxFailedNamespaces = 16

// failedADDs returns, by namespace/name, the pods whose last ADD in
// entries (oldest first, as outcome.Read returns them) failed and that no
// record names: a record, even of a later sandbox, speaks for the pod.
// DELs do not count: the runtime deletes each sandbox whose ADD failed
// before it tries again. A pod that is gone keeps its failure here, but
// no claim is reserved for it any more. Entries whose pod is not a valid
// namespace/name are left out.
func failedADDs(entries []outcome.Entry, recs []*state.Record) map[podRef]outcome.Entry {
	last := map[podRef]outcome.Entry{}
	for _, e := range entries {
		if p, ok := parsePod(e.Pod); ok && e.Verb == "ADD" {
			last[p] = e
		}
	}
	for _, r := range recs {
		delete(last, podRef{Namespace: r.Pod.Namespace, Name: r.Pod.Name})
	}
	for p, e := range last {
		if !e.Failed() {
			delete(last, p)
		}
	}
	return last
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
// of this driver's pool allocated to claims that reserve a pod of failed:
// Ready False, reason AttachFailed, with the plugin's error. The claims are
// listed per namespace (at most maxFailedNamespaces, the first in order).
func (w *StatusWriter) failureStatuses(ctx context.Context, failed map[podRef]outcome.Entry) (map[claimRef][]deviceStatus, error) {
	byNS := map[string]bool{}
	for p := range failed {
		byNS[p.Namespace] = true
	}
	namespaces := make([]string, 0, len(byNS))
	for ns := range byNS {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	if len(namespaces) > maxFailedNamespaces {
		namespaces = namespaces[:maxFailedNamespaces]
	}
	out := map[claimRef][]deviceStatus{}
	for _, ns := range namespaces {
		list, err := w.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list ResourceClaims of %s: %w", ns, err)
		}
		for i := range list.Items {
			c := &list.Items[i]
			for _, p := range reservingPods(c) {
				if e, ok := failed[podRef{Namespace: ns, Name: p}]; ok {
					ref := claimRef{Namespace: ns, Name: c.Name}
					out[ref] = append(out[ref], w.failedDevices(c, ref, e)...)
				}
			}
		}
	}
	return out, nil
}

// reservingPods are the names of the pods claim c is reserved for.
func reservingPods(c *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, r.Name)
		}
	}
	return out
}

// failedDevices are the entries of claim c's devices of this driver and
// pool for the failed ADD e.
func (w *StatusWriter) failedDevices(c *resourceapi.ResourceClaim, ref claimRef, e outcome.Entry) []deviceStatus {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []deviceStatus
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != w.Pool {
			continue
		}
		d := deviceStatus{Pool: r.Pool, Device: r.Device, Pod: e.Pod, Failed: true,
			Message: fmt.Sprintf("the rdma-chain CNI plugin's ADD for pod %s failed (CNI error %d): %s", e.Pod, e.Code, e.Msg)}
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// withFailures adds to want the failure entries of claims and devices no
// record speaks for.
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
