package reconcile

import (
	"testing"
	"time"
)

// TestRestoreBackoff checks that restores of one conflist that follow
// each other as soon as they are allowed wait 1 s, then twice as long
// each time, up to 5 min; a restore 30 s after the last one was allowed
// waits for nothing; another conflist has its own pace; a restore not yet
// allowed is refused until its wait is over, and a check is due on the
// channel then.
func TestRestoreBackoff(t *testing.T) {
	start := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	clock := start
	due := make(chan struct{}, 1)
	b := newRestoreBackoff(due)
	b.now = func() time.Time { return clock }
	b.min = 10 * time.Millisecond // the timer that sends on due is real
	steps := []struct {
		path    string
		after   time.Duration // since the previous step
		allowed bool
		wait    time.Duration // of the restore done when allowed
	}{
		{"a", 0, true, 0},
		{"a", 100 * time.Millisecond, true, 10 * time.Millisecond},
		{"a", time.Millisecond, false, 0},
		{"b", 0, true, 0},
		{"a", 9 * time.Millisecond, true, 20 * time.Millisecond},
		{"a", 20 * time.Millisecond, true, 40 * time.Millisecond},
		{"a", 40*time.Millisecond + 29*time.Second, true, 80 * time.Millisecond},
		{"a", 80*time.Millisecond + 30*time.Second, true, 0},
	}
	for i, s := range steps {
		clock = clock.Add(s.after)
		if got := b.allowed(s.path); got != s.allowed {
			t.Fatalf("step %d (%s at %v): allowed %v, want %v", i, s.path, clock.Sub(start), got, s.allowed)
		}
		if !s.allowed {
			continue
		}
		if got := b.restored(s.path); got != s.wait {
			t.Fatalf("step %d (%s at %v): wait %v, want %v", i, s.path, clock.Sub(start), got, s.wait)
		}
	}
	b.restored("d")
	if b.restored("d") != 10*time.Millisecond {
		t.Fatal("no wait for a second restore in a row")
	}
	<-due // the check once the wait is over
	b.min = time.Second
	for range 12 {
		b.restored("c")
	}
	if got := b.restored("c"); got != restoreWaitMax {
		t.Errorf("wait after 13 restores in a row %v, want %v", got, restoreWaitMax)
	}
}
