package dra

import (
	"context"
	"testing"
	"time"
)

// TestNextRead checks that a tick reads the node at once; an event waits
// for its burst to settle and the burst makes one reading; an ended
// context none.
func TestNextRead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ticks, evts int
		cancel      bool
		want        string
		wantOK      bool
		wantSettled bool // waited eventSettle before reading
	}{
		{name: "tick", ticks: 1, want: triggerInterval, wantOK: true},
		{name: "one event", evts: 1, want: triggerEvent, wantOK: true, wantSettled: true},
		{name: "a burst: one reading", evts: 5, want: triggerEvent, wantOK: true, wantSettled: true},
		{name: "ended", cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tick := make(chan time.Time, 1)
			events := make(chan struct{}, 1)
			fire := func() {
				select {
				case events <- struct{}{}:
				default:
				}
			}
			for range tc.ticks {
				tick <- time.Now()
			}
			if tc.evts > 0 {
				fire()
			}
			if tc.cancel {
				cancel()
			}
			settled := false
			// The rest of the burst comes while the first event settles.
			after := func(d time.Duration) <-chan time.Time {
				settled = d == eventSettle
				for range tc.evts - 1 {
					fire()
				}
				ch := make(chan time.Time, 1)
				ch <- time.Now()
				return ch
			}
			got, ok := nextRead(ctx, tick, events, after)
			if got != tc.want || ok != tc.wantOK || settled != tc.wantSettled {
				t.Fatalf("nextRead = %q, %v (settled %v); want %q, %v (settled %v)", got, ok, settled, tc.want, tc.wantOK, tc.wantSettled)
			}
			if len(events) != 0 {
				t.Fatal("an event left pending: the burst would read the node twice")
			}
		})
	}
}
