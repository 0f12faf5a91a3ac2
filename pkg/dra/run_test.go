package dra

import (
	"context"
	"testing"
	"time"
)

// TestNextRead: a tick reads the node at once; an event waits for its
// burst to settle and the burst makes one reading; an ended context none.
func TestNextRead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ticks, evts int
		cancel      bool
		want        string
		wantOK      bool
		wantLeft    int // events still pending after the call
	}{
		{name: "tick", ticks: 1, want: triggerInterval, wantOK: true},
		{name: "one event", evts: 1, want: triggerEvent, wantOK: true},
		{name: "a burst: one reading", evts: 5, want: triggerEvent, wantOK: true},
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
				// The rest of the burst comes while the first settles.
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(eventSettle / 4)
					for range tc.evts - 1 {
						fire()
					}
				}()
				defer func() { <-done }()
			}
			if tc.cancel {
				cancel()
			}
			start := time.Now()
			got, ok := nextRead(ctx, tick, events)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("nextRead = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
			if tc.evts > 0 && time.Since(start) < eventSettle {
				t.Fatalf("an event read the node after %s, before its burst settled (%s)", time.Since(start), eventSettle)
			}
			if len(events) != tc.wantLeft {
				t.Fatalf("%d events left pending, want %d: a burst would read the node twice", len(events), tc.wantLeft)
			}
		})
	}
}
