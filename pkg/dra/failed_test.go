package dra

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// addFailed is a failed ADD of pod's sandbox ctr, as the plugin logs it.
func addFailed(pod, ctr string) outcome.Entry {
	return outcome.Entry{Time: t0, Verb: "ADD", Pod: pod, PodUID: "uid-" + pod[strings.Index(pod, "/")+1:], ContainerID: ctr, Code: 111,
		Msg: "RDMA device mlx5_0 has 1 free GID entries of 32: refused"}
}

func succeeded(verb, pod, ctr string) outcome.Entry {
	return outcome.Entry{Time: t0, Verb: verb, Pod: pod, ContainerID: ctr}
}

// TestFailedADDs reads the log as outcome.Read gives it (each pod's last
// entry and last failure).
func TestFailedADDs(t *testing.T) {
	ok, fail := succeeded, addFailed
	recOf := record("ctr1", "team", "recorded", "c1", "mlx5_0", "mlx5-0", state.StepPlanned, t0)
	for _, tc := range []struct {
		name    string
		entries []outcome.Entry
		want    []string
	}{
		{"last ADD failed", []outcome.Entry{fail("team/a", "c1")}, []string{"team/a"}},
		{"the runtime's DEL of the failed sandbox", []outcome.Entry{fail("team/a", "c1"), ok("DEL", "team/a", "c1")}, []string{"team/a"}},
		{"a new sandbox's ADD succeeded", []outcome.Entry{fail("team/a", "c1"), ok("DEL", "team/a", "c1"), ok("ADD", "team/a", "c2")}, nil},
		{"retried, then deleted", []outcome.Entry{fail("team/a", "c1"), ok("DEL", "team/a", "c1"), ok("ADD", "team/a", "c2"), ok("DEL", "team/a", "c2")}, nil},
		{"a later sandbox failed again", []outcome.Entry{fail("team/a", "c1"), ok("DEL", "team/a", "c1"), ok("ADD", "team/a", "c2"),
			ok("DEL", "team/a", "c2"), fail("team/a", "c3"), ok("DEL", "team/a", "c3")}, []string{"team/a"}},
		{"a failed DEL", []outcome.Entry{{Verb: "DEL", Pod: "team/a", ContainerID: "c1", Code: 104, Msg: "x"}}, nil},
		{"a record speaks for the pod", []outcome.Entry{fail("team/recorded", "c9")}, nil},
		{"pods apart", []outcome.Entry{fail("team/a", "c1"), fail("ml/b", "c2"), ok("ADD", "team/c", "c3")}, []string{"ml/b", "team/a"}},
		{"not a pod", []outcome.Entry{fail("/a", "c1"), fail("Team/a", "c2"), fail("team/a/b", "c3"), fail("../a", "c4"),
			fail("team/"+strings.Repeat("a", 254), "c5"), {Verb: "ADD", Pod: "-", Code: 1}, {Verb: "ADD", Pod: "team", Code: 1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := failedADDs(outcome.Keep(tc.entries), []*state.Record{recOf})
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

// reservedClaim is allocatedClaim reserved for pods (UID "uid-NAME").
func reservedClaim(ns, name string, pods []string, devices ...string) *resourceapi.ResourceClaim {
	c := allocatedClaim(ns, name, devices...)
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return c
}

// TestStatusOfFailedADD checks that a failed ADD leaves no record: the
// claims reserved for the pod show the plugin's error on this driver's
// devices, through the runtime's DEL of the failed sandbox, until an ADD
// succeeds (the record speaks); a pod that is gone has no claim reserved
// for it (cleared).
func TestStatusOfFailedADD(t *testing.T) {
	otherPool := reservedClaim("team", "c3", []string{"trainer"})
	otherPool.Status.Allocation.Devices.Results = append(otherPool.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "rdma", Driver: DriverName, Pool: "node2", Device: "mlx5-0"})
	e := newStatusEnv(t, reservedClaim("team", "c1", []string{"trainer"}, "mlx5-0"),
		reservedClaim("team", "c2", []string{"someone-else"}, "mlx5-1"), otherPool)
	var entries []outcome.Entry
	e.w.Outcomes = func() ([]outcome.Entry, error) { return outcome.Keep(entries), nil }
	attachFailed := func(when string) {
		t.Helper()
		c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"])
		if c.Status != metav1.ConditionFalse || c.Reason != ReasonAttachFailed ||
			!strings.Contains(c.Message, "CNI error 111") || !strings.Contains(c.Message, "1 free GID entries of 32") {
			t.Fatalf("%s: %+v", when, c)
		}
	}

	entries = []outcome.Entry{addFailed("team/trainer", "s1"), succeeded("DEL", "team/trainer", "s1")}
	e.sync(t)
	attachFailed("after a failed ADD and the runtime's DEL")
	got := e.entries(t, "team", "c1")
	if len(got) != 2 || got[DriverName+"/mlx5-0"].NetworkData != nil {
		t.Fatalf("entries %v: want the other driver's kept and no network data", got)
	}
	if n := len(e.entries(t, "team", "c2")) + len(e.entries(t, "team", "c3")); n != 2 {
		t.Fatal("wrote into a claim not reserved for the pod, or of another pool")
	}

	entries = append(entries, succeeded("ADD", "team/trainer", "s2"))
	e.recs = []*state.Record{record("s2", "team", "trainer", "c1", "mlx5_0", "mlx5-0", state.StepDone, t0)}
	e.sync(t)
	if c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]); c.Status != metav1.ConditionTrue || c.Reason != ReasonAttached {
		t.Fatalf("after the retried ADD: %+v", c)
	}

	entries = append(entries, succeeded("DEL", "team/trainer", "s2"), addFailed("team/trainer", "s3"), succeeded("DEL", "team/trainer", "s3"))
	e.recs = nil
	e.sync(t)
	attachFailed("after a new sandbox's failed ADD")

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

// TestFailureMatchesPodUID checks that a failure of a pod of the same
// name but another UID (a StatefulSet's pod made again) is not the
// reserving pod's.
func TestFailureMatchesPodUID(t *testing.T) {
	for _, tc := range []struct {
		name, uid string
		want      bool
	}{
		{"the reserving pod", "uid-trainer", true},
		{"its predecessor", "uid-old", false},
		{"a log without UIDs", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStatusEnv(t, reservedClaim("team", "c1", []string{"trainer"}, "mlx5-0"))
			f := addFailed("team/trainer", "s1")
			f.PodUID = tc.uid
			e.w.Outcomes = func() ([]outcome.Entry, error) { return []outcome.Entry{f}, nil }
			e.sync(t)
			_, written := e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]
			if written != tc.want {
				t.Fatalf("entry written %v, want %v", written, tc.want)
			}
		})
	}
}

// TestStatusOfFailedADDListFails checks that a claim list that fails
// leaves what the API holds as it is, and the next pass lists again even
// when nothing changed on the node.
func TestStatusOfFailedADDListFails(t *testing.T) {
	e := newStatusEnv(t, reservedClaim("team", "c1", []string{"trainer"}, "mlx5-0"))
	entries := []outcome.Entry{addFailed("team/trainer", "s1")}
	e.w.Outcomes = func() ([]outcome.Entry, error) { return entries, nil }
	e.sync(t)
	calls := 0
	e.w.Changed = func() bool { calls++; return calls == 1 } // the node changes once
	lists := 0
	e.client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists == 1 {
			return true, nil, context.DeadlineExceeded
		}
		return false, nil, nil
	})
	if err := e.w.Sync(context.Background()); err == nil {
		t.Fatal("synced without the claims")
	}
	e.clock = e.clock.Add(time.Hour) // past the back-off
	if c := readyOf(t, e.entries(t, "team", "c1")[DriverName+"/mlx5-0"]); c.Reason != ReasonAttachFailed {
		t.Fatalf("after a failed list: %+v", c)
	}
	e.sync(t)
	if lists != 2 {
		t.Fatalf("%d lists, want the failed one tried again on the next pass", lists)
	}
}
