package dra

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func addFailed(pod string) outcome.Entry {
	return outcome.Entry{Time: t0, Verb: "ADD", Pod: pod, ContainerID: "ctr9", Code: 111,
		Msg: "RDMA device mlx5_0 has 1 free GID entries of 32: refused"}
}

func TestFailedADDs(t *testing.T) {
	ok := func(verb, pod string) outcome.Entry { return outcome.Entry{Time: t0, Verb: verb, Pod: pod} }
	recOf := record("ctr1", "team", "recorded", "c1", "mlx5_0", "mlx5-0", state.StepPlanned, t0)
	for _, tc := range []struct {
		name    string
		entries []outcome.Entry
		want    []string
	}{
		{"last ADD failed", []outcome.Entry{ok("ADD", "team/a"), addFailed("team/a")}, []string{"team/a"}},
		{"ADD succeeded after", []outcome.Entry{addFailed("team/a"), ok("ADD", "team/a")}, nil},
		{"the runtime's DEL of the failed sandbox", []outcome.Entry{addFailed("team/a"), ok("DEL", "team/a")}, []string{"team/a"}},
		{"retried, then deleted", []outcome.Entry{addFailed("team/a"), ok("DEL", "team/a"), ok("ADD", "team/a"), ok("DEL", "team/a")}, nil},
		{"a failed DEL", []outcome.Entry{{Verb: "DEL", Pod: "team/a", Code: 104, Msg: "x"}}, nil},
		{"a record speaks for the pod", []outcome.Entry{addFailed("team/recorded")}, nil},
		{"pods apart", []outcome.Entry{addFailed("team/a"), addFailed("ml/b"), ok("ADD", "team/c")}, []string{"ml/b", "team/a"}},
		{"not a pod", []outcome.Entry{addFailed(""), addFailed("-"), addFailed("team"), addFailed("team/a/b"),
			addFailed("Team/a"), addFailed("../a"), addFailed("team/" + strings.Repeat("a", 254)), addFailed("/a")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := failedADDs(tc.entries, []*state.Record{recOf})
			var names []string
			for p := range got {
				names = append(names, p.String())
			}
			if len(names) != len(tc.want) {
				t.Fatalf("failed pods %v, want %v", names, tc.want)
			}
			for _, w := range tc.want {
				p, _ := parsePod(w)
				if _, ok := got[p]; !ok {
					t.Fatalf("failed pods %v, want %v", names, tc.want)
				}
			}
		})
	}
}

// reservedClaim is allocatedClaim reserved for pods.
func reservedClaim(ns, name string, pods []string, devices ...string) *resourceapi.ResourceClaim {
	c := allocatedClaim(ns, name, devices...)
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return c
}

// A failed ADD leaves no record: the claims reserved for the pod show the
// plugin's error on this driver's devices, through the runtime's DEL of the
// failed sandbox, until an ADD succeeds (the record speaks); a pod that is
// gone has no claim reserved for it (cleared).
func TestStatusOfFailedADD(t *testing.T) {
	otherPool := reservedClaim("team", "c3", []string{"trainer"})
	otherPool.Status.Allocation.Devices.Results = append(otherPool.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "rdma", Driver: DriverName, Pool: "node2", Device: "mlx5-0"})
	e := newStatusEnv(t, reservedClaim("team", "c1", []string{"trainer"}, "mlx5-0"),
		reservedClaim("team", "c2", []string{"someone-else"}, "mlx5-1"), otherPool)
	var entries []outcome.Entry
	e.w.Outcomes = func() ([]outcome.Entry, error) { return entries, nil }

	entries = []outcome.Entry{addFailed("team/trainer"), {Time: t0, Verb: "DEL", Pod: "team/trainer"}}
	e.sync(t)
	got := e.entries(t, "team", "c1")
	c := readyOf(t, got[DriverName+"/mlx5-0"])
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonAttachFailed ||
		!strings.Contains(c.Message, "CNI error 111") || !strings.Contains(c.Message, "1 free GID entries of 32") {
		t.Fatalf("after a failed ADD: %+v", c)
	}
	if len(got) != 2 || got[DriverName+"/mlx5-0"].NetworkData != nil {
		t.Fatalf("entries %v: want the other driver's kept and no network data", got)
	}
	if n := len(e.entries(t, "team", "c2")) + len(e.entries(t, "team", "c3")); n != 2 {
		t.Fatal("wrote into a claim not reserved for the pod, or of another pool")
	}

	entries = append(entries, outcome.Entry{Time: t0, Verb: "ADD", Pod: "team/trainer"})
	e.recs = []*state.Record{record("ctr1", "team", "trainer", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.sync(t)
	if c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]); c.Status != metav1.ConditionTrue || c.Reason != ReasonAttached {
		t.Fatalf("after the retried ADD: %+v", c)
	}

	entries = append(entries, addFailed("team/trainer"), outcome.Entry{Time: t0, Verb: "DEL", Pod: "team/trainer"})
	e.recs = nil
	e.sync(t)
	if c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]); c.Reason != ReasonAttachFailed {
		t.Fatalf("after a new sandbox's failed ADD: %+v", c)
	}
	// The pod deleted: its claim is no longer reserved for it.
	c1, err := e.client.ResourceV1().ResourceClaims("team").Get(context.Background(), "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c1.Status.ReservedFor = nil
	if _, err := e.client.ResourceV1().ResourceClaims("team").UpdateStatus(context.Background(), c1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	if got := e.entries(t, "team", "c1"); len(got) != 1 {
		t.Fatalf("after the pod's delete: %v, want only the other driver's entry", got)
	}
}

// A claim list that fails leaves what the API holds as it is.
func TestStatusOfFailedADDListFails(t *testing.T) {
	e := newStatusEnv(t, reservedClaim("team", "c1", []string{"trainer"}, "mlx5-0"))
	entries := []outcome.Entry{addFailed("team/trainer")}
	e.w.Outcomes = func() ([]outcome.Entry, error) { return entries, nil }
	e.sync(t)
	e.client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	if err := e.w.Sync(context.Background()); err == nil {
		t.Fatal("synced without the claims")
	}
	if c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]); c.Reason != ReasonAttachFailed {
		t.Fatalf("after a failed list: %+v", c)
	}
}
