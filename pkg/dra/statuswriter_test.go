package dra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// pagedClaims serves the lists of ResourceClaims of the cluster a page of
// the request's Limit at a time, as the API server does, and records
// each request's Limit.
type pagedClaims struct {
	items  []resourceapi.ResourceClaim
	limits []int64
}

func (p *pagedClaims) react(a k8stesting.Action) (bool, runtime.Object, error) {
	opts := a.(k8stesting.ListActionImpl).ListOptions
	p.limits = append(p.limits, opts.Limit)
	start := 0
	if opts.Continue != "" {
		var err error
		if start, err = strconv.Atoi(opts.Continue); err != nil {
			return true, nil, apierrors.NewBadRequest("continue " + opts.Continue)
		}
	}
	end := len(p.items)
	if opts.Limit > 0 && start+int(opts.Limit) < end {
		end = start + int(opts.Limit)
	}
	list := &resourceapi.ResourceClaimList{Items: p.items[start:end]}
	if end < len(p.items) {
		list.Continue = strconv.Itoa(end)
	}
	return true, list, nil
}

func TestStatusSeedPaged(t *testing.T) {
	const claims = 2*claimPageSize + 7
	p := &pagedClaims{}
	seeded := map[string]bool{}
	for i := range claims {
		c := allocatedClaim("team", fmt.Sprintf("c%d", i), "mlx5-0")
		switch i % 100 {
		case 0: // an entry of this driver and pool
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: DriverName, Pool: testPool, Device: "mlx5-0"})
			seeded[c.Name] = true
		case 1: // of this driver on another node
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: DriverName, Pool: "node2", Device: "mlx5-0"})
		}
		p.items = append(p.items, *c)
	}
	e := newStatusEnv(t)
	e.client.PrependReactor("list", "resourceclaims", p.react)
	e.sync(t)

	t.Logf("%d claims listed in %d requests, limits %v; %d seeded", claims, len(p.limits), p.limits, len(seeded))
	if len(p.limits) != 3 {
		t.Fatalf("%d list requests for %d claims, want 3 pages of %d", len(p.limits), claims, claimPageSize)
	}
	for _, l := range p.limits {
		if l <= 0 || l > claimPageSize {
			t.Fatalf("list limits %v: a request without a page limit reads every claim of the cluster at once", p.limits)
		}
	}
	// No record names them: each seeded claim is cleared (the fake has
	// none of them: NotFound, nothing left to clear), no other one.
	cleared := map[string]bool{}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "patch" {
			cleared[a.(k8stesting.PatchActionImpl).Name] = true
		}
	}
	if len(cleared) != len(seeded) {
		t.Fatalf("cleared %v, want the claims with entries of this pool %v", cleared, seeded)
	}
	for name := range seeded {
		if !cleared[name] {
			t.Fatalf("claim %s with an entry of this pool not cleared (cleared %v)", name, cleared)
		}
	}
	if len(e.w.written) != 0 {
		t.Fatalf("written %v after the clearing", e.w.written)
	}
}

func TestStatusSeedBacksOff(t *testing.T) {
	e := newStatusEnv(t, allocatedClaim("team", "c1", "mlx5-0"))
	var attempts []time.Time
	down := true
	e.client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		attempts = append(attempts, e.clock)
		if down {
			return true, nil, apierrors.NewServiceUnavailable("down")
		}
		return false, nil, nil
	})
	const passes = 300 // one a second, as --status-interval 1s
	for range passes {
		_ = e.w.Sync(context.Background())
		e.clock = e.clock.Add(time.Second)
	}
	var gaps []time.Duration
	for i := 1; i < len(attempts); i++ {
		gaps = append(gaps, attempts[i].Sub(attempts[i-1]))
	}
	t.Logf("%d lists in %d passes of 1s, gaps %v", len(attempts), passes, gaps)
	if len(attempts) < 3 || len(attempts) > 10 {
		t.Fatalf("%d lists in %d passes, want a growing back-off (1s doubling, jittered)", len(attempts), passes)
	}
	base := retryBackoff.Duration
	for i, g := range gaps {
		lo := min(base<<i, retryBackoff.Cap)
		hi := time.Duration(float64(lo)*(1+retryBackoff.Jitter)) + time.Second // the passes' own tick
		if g < lo || g > hi {
			t.Fatalf("gap %d: %v, want within [%v, %v] (gaps %v)", i, g, lo, hi, gaps)
		}
	}

	down = false
	e.clock = e.clock.Add(retryBackoff.Cap * 2)
	e.sync(t)
	if !e.w.seeded {
		t.Fatal("not seeded once the API answers")
	}
	// A pass that synced starts the back-off anew: a failure after it is
	// retried after the first steps again.
	reads := 0
	e.w.Records = func() ([]*state.Record, error) { reads++; return nil, errors.New("EIO") }
	for range 10 {
		_ = e.w.Sync(context.Background())
		e.clock = e.clock.Add(time.Second)
	}
	if reads < 3 {
		t.Fatalf("%d reads in 10 passes after a synced one, want the back-off started anew", reads)
	}
}
