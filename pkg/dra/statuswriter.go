package dra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metaac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// FieldManager is the server-side apply field manager of the claim status
// entries the driver writes: it owns them, and only them.
const FieldManager = "rdma-chain-dra"

// resyncEvery is how many passes without a change in the records pass
// before the records are read and applied again all the same.
const resyncEvery = 30

// StatusWriter writes each pod's RDMA interface into the status.devices of
// the claim it came from (KEP-4817), and clears it when the pod's
// attachment is gone. It learns the interfaces from the CNI plugin's
// attachment records, which keep the claims: the plugin itself never calls
// the API. A failed ADD (Outcomes) and a configuration Prepare refused
// (InvalidConfigs) show on devices no record speaks for.
type StatusWriter struct {
	Client  kubernetes.Interface
	Pool    string // the node's name: the driver's pool
	Records func() ([]*state.Record, error)
	// Outcomes reads the plugin's outcome log (outcome.Read), where a
	// failed ADD, which leaves no record, is told. Nil: no failures are
	// written.
	Outcomes func() ([]outcome.Entry, error)
	// InvalidConfigs returns the entries of the claims whose Prepare
	// refused their configuration (Driver.invalidConfigStatuses), read
	// every pass: a change is a change of the records. Nil: none.
	InvalidConfigs func() map[claimRef][]deviceStatus
	// Changed reports a change of the records since the last call (the
	// attachments folder's modification time): a pass without one skips
	// reading them. Nil: every pass reads them.
	Changed func() bool
	Log     *slog.Logger
	Now     func() time.Time

	seeded     bool
	dirty      bool                        // the last pass left something unwritten
	passes     int                         // since the last full pass
	written    map[claimRef][]deviceStatus // what the API holds of this driver's entries
	refused    map[claimRef][]deviceStatus // entries the API refused for good: not written again as they are
	since      map[string]metav1.Time      // when each entry's Ready condition took its status
	outcomeErr string                      // the outcome log's last read error, said once
	invalid    map[claimRef][]deviceStatus // InvalidConfigs' last answer
	backoff    *wait.Backoff               // since the last failed pass; nil after a pass that synced
	retryAt    time.Time                   // no pass before, after a failed one
}

// retryBackoff spaces the passes after a failed one (the API server
// unreachable or overloaded, the records unreadable): growing, capped,
// and jittered, so that the drivers of many nodes do not retry together.
var retryBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Steps: 16, Cap: 5 * time.Minute}

// claimPageSize is how many claims one list request asks for: a list
// reads the cluster's claims a page at a time, never all in one answer.
const claimPageSize = 500

// Run syncs every interval until ctx ends.
func (w *StatusWriter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := w.Sync(ctx); err != nil {
			w.Log.Warn("claim status not synced: retried after a back-off", "retry_at", w.retryAt, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync makes the status.devices entries of this driver's pool match the
// records: writes what changed, and clears the entries of claims no record
// names any more. The first pass reads the entries the API holds (this
// driver's, of its pool), so that a claim whose pod went while the driver
// was down is cleared too. After a failed pass, the passes until the
// back-off's next step (retryBackoff) do nothing.
func (w *StatusWriter) Sync(ctx context.Context) error {
	if w.now().Before(w.retryAt) {
		return nil
	}
	err := w.sync(ctx)
	if err == nil {
		w.backoff, w.retryAt = nil, time.Time{}
		return nil
	}
	if w.backoff == nil {
		b := retryBackoff
		w.backoff = &b
	}
	w.retryAt = w.now().Add(w.backoff.Step())
	return err
}

// sync is one pass of Sync.
func (w *StatusWriter) sync(ctx context.Context) error {
	changed := w.Changed == nil || w.Changed()
	if w.InvalidConfigs != nil {
		invalid := w.InvalidConfigs()
		changed = changed || !reflect.DeepEqual(invalid, w.invalid)
		w.invalid = invalid
	}
	w.passes++
	if w.seeded && !w.dirty && !changed && w.passes < resyncEvery {
		return nil
	}
	w.passes = 0
	if !w.seeded {
		if err := w.seed(ctx); err != nil {
			return err
		}
	}
	// Nothing is cleared on a partial view, and the next pass tries again.
	recs, err := w.Records()
	if err != nil && !onlyCorrupt(err) {
		w.dirty = true
		return fmt.Errorf("read the attachment records: %w", err)
	}
	want := claimStatuses(recs, w.Pool)
	withFailures(want, w.invalid)
	if failed := w.failedADDs(recs); len(failed) > 0 {
		failures, err := w.failureStatuses(ctx, failed)
		if err != nil {
			w.dirty = true
			return err
		}
		withFailures(want, failures)
	}
	w.dropRefused(want)
	var errs []error
	for ref, devs := range want {
		if _, refused := w.refused[ref]; !refused && !reflect.DeepEqual(w.written[ref], devs) {
			errs = append(errs, w.apply(ctx, ref, devs))
		}
	}
	for ref := range w.written {
		if _, ok := want[ref]; !ok {
			errs = append(errs, w.apply(ctx, ref, nil))
		}
	}
	err = errors.Join(errs...)
	w.dirty = err != nil
	return err
}

// dropRefused forgets the refusals of claims whose entries are no longer
// those the API refused: the new entries are written.
func (w *StatusWriter) dropRefused(want map[claimRef][]deviceStatus) {
	for ref, devs := range w.refused {
		if !reflect.DeepEqual(want[ref], devs) {
			delete(w.refused, ref)
			if _, ok := w.written[ref]; !ok {
				w.forget(ref)
			}
		}
	}
}

// failedADDs reads the outcome log for the pods whose last ADD failed; an
// unreadable log is said and read as no failures.
func (w *StatusWriter) failedADDs(recs []*state.Record) map[podRef]outcome.Entry {
	if w.Outcomes == nil {
		return nil
	}
	entries, err := w.Outcomes()
	if err != nil && err.Error() != w.outcomeErr {
		w.Log.Warn("the plugin's outcome log is not wholly readable: failed ADDs of its unreadable part are not shown in claims", "error", err)
	}
	w.outcomeErr = ""
	if err != nil {
		w.outcomeErr = err.Error()
	}
	return failedADDs(entries, recs)
}

// seededStatus stands for entries found in the API at start: unlike any
// status derived from a record, so that the first pass applies or clears
// every one.
var seededStatus = []deviceStatus{{Pool: "(read at start)"}}

// seed reads which claims hold an entry of this driver and pool, a page
// of the cluster's claims at a time: what is kept is this node's claims
// only.
func (w *StatusWriter) seed(ctx context.Context) error {
	written := map[claimRef][]deviceStatus{}
	err := w.eachClaim(ctx, metav1.NamespaceAll, func(claim *resourceapi.ResourceClaim) {
		for _, d := range claim.Status.Devices {
			if d.Driver == DriverName && d.Pool == w.Pool {
				written[claimRef{Namespace: claim.Namespace, Name: claim.Name}] = seededStatus
			}
		}
	})
	if err != nil {
		return err
	}
	w.written, w.since = written, map[string]metav1.Time{}
	w.refused = map[claimRef][]deviceStatus{}
	w.seeded = true
	return nil
}

// eachClaim calls fn with each ResourceClaim of namespace ns (all: every
// namespace), listed claimPageSize at a time. A continuation the API
// server no longer holds fails the list rather than reading every claim
// in one answer; the pass is retried.
func (w *StatusWriter) eachClaim(ctx context.Context, ns string, fn func(*resourceapi.ResourceClaim)) error {
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return w.Client.ResourceV1().ResourceClaims(ns).List(ctx, opts)
	}))
	p.PageSize, p.PageBufferSize, p.FullListIfExpired = claimPageSize, 0, false
	err := p.EachListItem(ctx, metav1.ListOptions{Limit: claimPageSize}, func(obj runtime.Object) error {
		c, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return fmt.Errorf("a list of ResourceClaims holds a %T", obj)
		}
		fn(c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list ResourceClaims %s: %w", orAll(ns), err)
	}
	return nil
}

func orAll(ns string) string {
	if ns == metav1.NamespaceAll {
		return "of every namespace"
	}
	return "of " + ns
}

// apply writes devs as this driver's entries of claim ref, by server-side
// apply: entries of the field manager that devs lacks are removed, those of
// other drivers are untouched. A refusal that is final (finalRefusal) is
// said once and kept: the same entries are not written again, and a
// refused clearing has nothing left to clear. Other errors are returned,
// and the write is tried again.
func (w *StatusWriter) apply(ctx context.Context, ref claimRef, devs []deviceStatus) error {
	log := w.Log.With("claim", ref)
	st := resourceac.ResourceClaimStatus()
	for _, d := range devs {
		st.WithDevices(w.entry(ref, d))
	}
	claim := resourceac.ResourceClaim(ref.Name, ref.Namespace).WithStatus(st)
	_, err := w.Client.ResourceV1().ResourceClaims(ref.Namespace).ApplyStatus(ctx, claim,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	switch {
	case err != nil && !finalRefusal(err):
		return fmt.Errorf("claim %s: write status.devices: %w", ref, err)
	case apierrors.IsNotFound(err):
		log.Debug("claim gone: no status to write")
	case err != nil:
		// The claim is no longer this node's, or no longer allocates the
		// recorded device (deallocated, allocated anew under the same name).
		log.Warn("the API server refuses the claim's status: not written again until the entries change",
			"reason", apierrors.ReasonForError(err), "code", statusCode(err), "clearing", len(devs) == 0, "error", err)
	case len(devs) == 0:
		log.Info("cleared claim status")
	default:
		log.Info("wrote claim status", "devices", len(devs), "interface", devs[0].IfName, "ready", devs[0].Ready)
	}
	switch {
	case len(devs) == 0:
		delete(w.written, ref)
		w.forget(ref)
	case err != nil:
		w.refused[ref] = devs
	default:
		w.written[ref] = devs
	}
	return nil
}

// finalRefusal reports whether err, the API server's answer to a status
// write, is final for the entries written: a request error (4xx) about the
// claim (forbidden once the claim is allocated to another node, not found,
// a conflict with a claim deleted or allocated anew, invalid entries)
// stays the same however often the same write is sent. Errors of the
// server or of the way to it (5xx, timeouts, throttling, no answer at all)
// and a refused credential, which is renewed, are transient.
func finalRefusal(err error) bool {
	code := statusCode(err)
	switch code {
	case 0: // no status: the request did not get an answer
		return false
	case http.StatusUnauthorized, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return code >= 400 && code < 500
}

// statusCode is the HTTP status of an API error; 0 when err is none.
func statusCode(err error) int32 {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		return 0
	}
	return s.Status().Code
}

// entry is the apply configuration of one status.devices entry; its Ready
// condition keeps the time it took its status.
func (w *StatusWriter) entry(ref claimRef, d deviceStatus) *resourceac.AllocatedDeviceStatusApplyConfiguration {
	status := metav1.ConditionFalse
	if d.Ready {
		status = metav1.ConditionTrue
	}
	k := ref.String() + "/" + d.key() + "/" + string(status)
	at, ok := w.since[k]
	if !ok {
		at = metav1.NewTime(w.now().UTC().Truncate(time.Second))
		w.since[k] = at
	}
	e := resourceac.AllocatedDeviceStatus().WithDriver(DriverName).WithPool(d.Pool).WithDevice(d.Device).
		WithConditions(metaac.Condition().WithType(ConditionReady).WithStatus(status).
			WithReason(d.reason()).WithMessage(d.Message).WithLastTransitionTime(at))
	if d.ShareID != "" {
		e.WithShareID(d.ShareID)
	}
	if d.IfName != "" || d.MAC != "" || len(d.IPs) > 0 {
		nd := resourceac.NetworkDeviceData().WithInterfaceName(d.IfName).WithHardwareAddress(d.MAC)
		if len(d.IPs) > 0 {
			nd.WithIPs(d.IPs...)
		}
		e.WithNetworkData(nd)
	}
	return e
}

// forget drops the condition times of ref's entries.
func (w *StatusWriter) forget(ref claimRef) {
	for k := range w.since {
		if len(k) > len(ref.String()) && k[:len(ref.String())+1] == ref.String()+"/" {
			delete(w.since, k)
		}
	}
}

func (w *StatusWriter) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// onlyCorrupt reports whether every error in err (as state.Store.List
// joins them) is an unreadable record, which the plugin quarantines: the
// readable records are then the whole view.
func onlyCorrupt(err error) bool {
	var ce *state.CorruptError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.As(e, &ce) {
				return false
			}
		}
		return true
	}
	return errors.As(err, &ce)
}

// ModTimeChanged returns a Changed func for the records in dir: the plugin
// writes each record by rename and removes it by unlink, so the folder's
// modification time moves with every change. A time younger than settle
// counts as a change on every call: a second change within the file
// system's clock tick leaves the time as it was. A path that is missing
// counts as a change when it goes, not on every call after.
func ModTimeChanged(dir string, now func() time.Time) func() bool {
	const settle = 2 * time.Second
	var last time.Time
	missing := false
	return func() bool {
		fi, err := os.Stat(dir)
		if err != nil {
			gone := errors.Is(err, fs.ErrNotExist)
			seen := missing && gone
			missing, last = gone, time.Time{}
			return !seen
		}
		missing = false
		mt := fi.ModTime()
		if mt.Equal(last) && now().Sub(mt) >= settle {
			return false
		}
		last = mt
		return true
	}
}

// AnyChanged reports a change when any of changed does; each is asked on
// every call, so that each keeps its own view current.
func AnyChanged(changed ...func() bool) func() bool {
	return func() bool {
		moved := false
		for _, c := range changed {
			moved = c() || moved
		}
		return moved
	}
}
