package dra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/syncbuf"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// The writer's logic against the API's fake clientset (server-side apply
// by its field-managed tracker): which entries it writes, keeps and
// clears. The API server's own checks (an entry must name an allocated
// device, the per-driver authorization) are the cluster tier's.

const testPool = "node1"

var t0 = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

// allocatedClaim is claim ns/name allocated devices of this driver's pool
// (and one of another driver), holding otherStatus for the other driver.
func allocatedClaim(ns, name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	res := []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: testPool, Device: "gpu-0"}}
	for _, d := range devices {
		res = append(res, resourceapi.DeviceRequestAllocationResult{Request: "rdma", Driver: DriverName, Pool: testPool, Device: d})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.example.com", Pool: testPool, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Up", LastTransitionTime: metav1.NewTime(t0)}}}}
	return c
}

// record is pod ns/pod's attachment of RDMA device dev (DRA name draDev)
// from claim ns/claim, at step.
func record(id, ns, pod, claim, dev, draDev string, step state.Step, created time.Time) *state.Record {
	return &state.Record{Network: "rdma", ContainerID: id, IfName: "eth0", Mode: rdma.ModeShared, CreatedAt: created,
		Pod: state.Pod{Namespace: ns, Name: pod},
		Links: []state.Link{{Device: dev, Kind: state.LinkIPVlan, Step: step, IPAM: true,
			HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:AA:BB:CC:DD:01"},
			IPs:      []string{"fd00::5/64", "not-an-address"}}},
		Claims: []state.Claim{{Namespace: ns, Name: claim, Driver: DriverName, Pool: testPool, Device: draDev, RDMADevice: dev},
			{Namespace: ns, Name: claim, Driver: "other.example.com", Pool: testPool, Device: "eth3", RDMADevice: "x"}}}
}

type statusEnv struct {
	client *fake.Clientset
	recs   []*state.Record
	recErr error
	clock  time.Time // the writer's Now
	w      *StatusWriter
}

func newStatusEnv(t *testing.T, claims ...*resourceapi.ResourceClaim) *statusEnv {
	t.Helper()
	e := &statusEnv{client: fake.NewClientset(), clock: t0}
	for _, c := range claims {
		if _, err := e.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.w = e.writer()
	return e
}

// writer is a fresh writer on e's client and records, as after a restart.
func (e *statusEnv) writer() *StatusWriter {
	return &StatusWriter{Client: e.client, Pool: testPool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Records: func() ([]*state.Record, error) { return e.recs, e.recErr }, Now: func() time.Time { return e.clock }}
}

func (e *statusEnv) sync(t *testing.T) {
	t.Helper()
	if err := e.w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// entries returns claim ns/name's status.devices by driver/device.
func (e *statusEnv) entries(t *testing.T, ns, name string) map[string]resourceapi.AllocatedDeviceStatus {
	t.Helper()
	c, err := e.client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourceapi.AllocatedDeviceStatus{}
	for _, d := range c.Status.Devices {
		out[d.Driver+"/"+d.Device] = d
	}
	return out
}

func (e *statusEnv) applies() int {
	n := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func readyOf(t *testing.T, d resourceapi.AllocatedDeviceStatus) metav1.Condition {
	t.Helper()
	if len(d.Conditions) != 1 || d.Conditions[0].Type != ConditionReady {
		t.Fatalf("conditions %+v", d.Conditions)
	}
	return d.Conditions[0]
}

func TestStatusWrittenAndCleared(t *testing.T) {
	e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"))
	e.recs = []*state.Record{record("ctr1", "team", "trainer", "c1", "mlx5_0", "mlx5-0", state.StepPlanned, t0)}
	e.sync(t)
	got := e.entries(t, "team", "c1")
	if c := readyOf(t, got[DriverName+"/mlx5-0"]); c.Status != metav1.ConditionFalse || c.Reason != ReasonAttaching {
		t.Fatalf("while attaching: %+v", c)
	}

	e.recs[0].Links[0].Step = state.StepDone
	e.sync(t)
	got = e.entries(t, "team", "c1")
	d := got[DriverName+"/mlx5-0"]
	wantNet := &resourceapi.NetworkDeviceData{InterfaceName: "rdma0", IPs: []string{"fd00::5/64"}, HardwareAddress: "02:aa:bb:cc:dd:01"}
	if !reflect.DeepEqual(d.NetworkData, wantNet) || d.Pool != testPool {
		t.Fatalf("entry %+v network %+v, want %+v", d, d.NetworkData, wantNet)
	}
	if c := readyOf(t, d); c.Status != metav1.ConditionTrue || c.Reason != ReasonAttached || c.LastTransitionTime.IsZero() {
		t.Fatalf("after ADD: %+v", c)
	}
	if _, ok := got["gpu.example.com/gpu-0"]; !ok || len(got) != 2 {
		t.Fatalf("entries %v: the other driver's must stay", got)
	}
	if _, ok := got["other.example.com/eth3"]; ok {
		t.Fatal("wrote an entry for another driver's device")
	}

	before := e.applies()
	e.sync(t)
	if n := e.applies() - before; n != 0 {
		t.Fatalf("unchanged records: %d applies, want 0", n)
	}

	e.recs = nil // DEL
	e.sync(t)
	got = e.entries(t, "team", "c1")
	if _, ok := got[DriverName+"/mlx5-0"]; ok || len(got) != 1 {
		t.Fatalf("after DEL: %v, want only the other driver's entry", got)
	}
}

func TestStatusClearedAfterRestart(t *testing.T) {
	e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"), allocatedClaim("team", "c2", "rxe0"))
	e.recs = []*state.Record{
		record("ctr1", "team", "a", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0),
		record("ctr2", "team", "b", "c2", "rxe0", "rxe0", state.StepDone, t0),
	}
	e.sync(t)
	e.recs = e.recs[1:] // pod a deleted while the driver is down
	e.w = e.writer()
	e.sync(t)
	if got := e.entries(t, "team", "c1"); len(got) != 1 {
		t.Fatalf("c1 after restart: %v, want its entry cleared", got)
	}
	if got := e.entries(t, "team", "c2"); len(got) != 2 {
		t.Fatalf("c2 after restart: %v, want its entry kept", got)
	}
}

func TestStatusClaimGone(t *testing.T) {
	e := newStatusEnv(t)
	e.recs = []*state.Record{record("ctr1", "team", "a", "gone", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.sync(t) // NotFound is no error
	e.recs = nil
	e.sync(t)
	if e.w.dirty {
		t.Fatal("a gone claim left the writer retrying")
	}
}

func TestStatusUnreadableRecords(t *testing.T) {
	e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"))
	e.recs = []*state.Record{record("ctr1", "team", "a", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.sync(t)
	// An I/O error: no view of the records, nothing cleared.
	e.recs, e.recErr = nil, fmt.Errorf("list attachment records: %w", errors.New("EIO"))
	if err := e.w.Sync(context.Background()); err == nil {
		t.Fatal("an unreadable folder synced")
	}
	if got := e.entries(t, "team", "c1"); len(got) != 2 {
		t.Fatalf("entries %v after an unreadable folder, want kept", got)
	}
	// Only a corrupt record beside the readable ones: synced.
	e.recs = []*state.Record{record("ctr1", "team", "a", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.recErr = errors.Join(&state.CorruptError{Path: "/x", Err: errors.New("bad")})
	e.sync(t)
}

func TestStatusRetriedAfterAPIError(t *testing.T) {
	e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"))
	e.recs = []*state.Record{record("ctr1", "team", "a", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	calls := 0
	e.w.Changed = func() bool { calls++; return calls == 1 } // the records change once
	e.client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if calls == 1 {
			return true, nil, apierrors.NewServiceUnavailable("down")
		}
		return false, nil, nil
	})
	if err := e.w.Sync(context.Background()); err == nil {
		t.Fatal("an API error synced")
	}
	e.clock = e.clock.Add(time.Hour) // past the back-off
	e.sync(t)                        // no change in the records: retried all the same
	if got := e.entries(t, "team", "c1"); len(got) != 2 {
		t.Fatalf("entries %v: not retried", got)
	}
}

func TestClaimStatuses(t *testing.T) {
	older := record("ctr1", "team", "a", "shared", "mlx5_0", "mlx5-0", state.StepDone, t0)
	newer := record("ctr2", "team", "b", "shared", "mlx5_0", "mlx5-0", state.StepDone, t0.Add(time.Minute))
	newer.Links[0].PodName = "rdma1"
	noIPs := record("ctr3", "team", "c", "c3", "rxe0", "rxe0", state.StepDone, t0)
	noIPs.Links[0].IPs = nil // IPAM lease not yet recorded
	many := record("ctr4", "team", "d", "c4", "rxe1", "rxe1", state.StepDone, t0)
	many.Links[0].IPAM, many.Links[0].Kind = false, state.LinkNone
	otherPool := record("ctr5", "team", "e", "c5", "mlx5_1", "mlx5-1", state.StepDone, t0)
	otherPool.Claims[0].Pool = "node2"
	got := claimStatuses([]*state.Record{newer, older, noIPs, many, otherPool}, testPool)
	if d := got[claimRef{"team", "shared"}]; len(d) != 1 || d[0].IfName != "rdma0" || d[0].Pod != "team/a" {
		t.Fatalf("shared claim: %+v, want the older record's", d)
	}
	if d := got[claimRef{"team", "c3"}]; len(d) != 1 || d[0].Ready {
		t.Fatalf("no lease yet: %+v, want not ready", d)
	}
	if d := got[claimRef{"team", "c4"}]; len(d) != 1 || !d[0].Ready || d[0].IfName != "" || d[0].MAC != "" {
		t.Fatalf("link without a netdev: %+v, want ready without network data", d)
	}
	if _, ok := got[claimRef{"team", "c5"}]; ok || len(got) != 3 {
		t.Fatalf("statuses %+v: another pool's claim written", got)
	}
}

func TestModTimeChanged(t *testing.T) {
	dir := t.TempDir()
	setMtime := func(m time.Time) {
		if err := os.Chtimes(dir, m, m); err != nil {
			t.Fatal(err)
		}
	}
	m, now := t0, t0.Add(time.Second)
	setMtime(m)
	changed := ModTimeChanged(dir, func() time.Time { return now })
	for _, step := range []struct {
		name  string
		mtime time.Time
		now   time.Time
		want  bool
	}{
		{"first look", m, t0.Add(time.Second), true},
		{"unchanged but younger than the settle time", m, t0.Add(time.Second), true},
		{"unchanged and settled", m, t0.Add(time.Minute), false},
		{"changed", t0.Add(2 * time.Minute), t0.Add(time.Hour), true},
		{"unchanged again", t0.Add(2 * time.Minute), t0.Add(time.Hour), false},
		{"gone", time.Time{}, t0.Add(time.Hour), true},
		{"still gone", time.Time{}, t0.Add(time.Hour), false},
		{"back", t0.Add(2 * time.Minute), t0.Add(time.Hour), true},
	} {
		if step.mtime.IsZero() {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			now = step.now
			if got := changed(); got != step.want {
				t.Fatalf("%s: changed %v, want %v", step.name, got, step.want)
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		setMtime(step.mtime)
		now = step.now
		if got := changed(); got != step.want {
			t.Fatalf("%s: changed %v, want %v", step.name, got, step.want)
		}
	}
}

func TestStatusRefusedWrite(t *testing.T) {
	claims := schema.GroupResource{Group: resourceapi.GroupName, Resource: "resourceclaims"}
	for _, tc := range []struct {
		name  string
		err   error
		final bool
	}{
		{"forbidden: allocated to another node", apierrors.NewForbidden(claims, "c1", errors.New("associated-node")), true},
		{"not found", apierrors.NewNotFound(claims, "c1"), true},
		{"conflict: a claim allocated anew", apierrors.NewConflict(claims, "c1", errors.New("uid differs")), true},
		{"invalid: device no longer allocated", apierrors.NewInvalid(schema.GroupKind{Group: resourceapi.GroupName, Kind: "ResourceClaim"}, "c1",
			field.ErrorList{field.Invalid(field.NewPath("status", "devices"), "mlx5-0", "not allocated")}), true},
		{"gone", apierrors.NewResourceExpired("gone"), true},
		{"unavailable", apierrors.NewServiceUnavailable("down"), false},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"server timeout", apierrors.NewServerTimeout(claims, "patch", 1), false},
		{"throttled", apierrors.NewTooManyRequests("later", 1), false},
		{"unauthorized: a token being renewed", apierrors.NewUnauthorized("expired"), false},
		{"no answer", fmt.Errorf("dial: %w", errors.New("connection refused")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"))
			var logs syncbuf.Buffer
			e.w.Log = slog.New(slog.NewTextHandler(&logs, nil))
			e.recs = []*state.Record{record("ctr1", "team", "a", "c1", "mlx5_0", "mlx5-0", state.StepPlanned, t0)}
			e.client.PrependReactor("patch", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			const passes = 5
			var errs []error
			for range passes {
				if err := e.w.Sync(context.Background()); err != nil {
					errs = append(errs, err)
				}
				e.clock = e.clock.Add(time.Hour) // past the back-off
			}
			want := 1
			if !tc.final {
				want = passes
			}
			if n := e.applies(); n != want {
				t.Fatalf("%d writes over %d passes, want %d (errors: %v)", n, passes, want, errs)
			}
			if (len(errs) == 0) != tc.final {
				t.Fatalf("Sync errors %v, want some: %v", errs, !tc.final)
			}
			if tc.final && tc.err != nil && !apierrors.IsNotFound(tc.err) {
				said := strings.Count(logs.String(), "the API server refuses the claim's status")
				if said != 1 || !strings.Contains(logs.String(), "claim=team/c1") ||
					!strings.Contains(logs.String(), "reason="+string(apierrors.ReasonForError(tc.err))) {
					t.Fatalf("refusal said %d times, want once with the claim and reason:\n%s", said, logs.String())
				}
			}
			if !tc.final {
				return
			}
			e.recs[0].Links[0].Step = state.StepDone // the entries change: written again, once
			for range passes {
				if err := e.w.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if n := e.applies(); n != 2 {
				t.Fatalf("%d writes after the entries changed, want 2", n)
			}
		})
	}
}
