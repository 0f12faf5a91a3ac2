package reconcile

import (
	"sync"
	"time"
)

// The pace of the entries put back into one conflist: a restore within
// restoreQuiet of the time the previous one was allowed means the agent
// rewrote the file again at once (it removes the entry whenever it sees
// it), so the next restore waits restoreWaitMin, then twice as long each
// time, up to restoreWaitMax; a restore after a quiet spell waits for
// nothing.
const (
	restoreQuiet   = 30 * time.Second
	restoreWaitMin = time.Second
	restoreWaitMax = 5 * time.Minute
)

// restoreBackoff paces the restores of each conflist, so that an agent
// that keeps rewriting its conflist without the entry is not met with a
// rewrite of ours for each of its own.
type restoreBackoff struct {
	quiet, min, max time.Duration
	// due receives a check when a wait is over: no change of the conf dir
	// may come to trigger one.
	due   chan<- struct{}
	now   func() time.Time
	mu    sync.Mutex
	files map[string]*restorePace
}

// restorePace is one conflist's: when its next restore is allowed, after
// what wait, and the timer that says so.
type restorePace struct {
	next  time.Time
	wait  time.Duration
	timer *time.Timer
}

func newRestoreBackoff(due chan<- struct{}) *restoreBackoff {
	return &restoreBackoff{quiet: restoreQuiet, min: restoreWaitMin, max: restoreWaitMax, due: due, now: time.Now, files: map[string]*restorePace{}}
}

// allowed reports whether the entry may go back into path now.
func (b *restoreBackoff) allowed(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.files[path]
	return p == nil || !b.now().Before(p.next)
}

// restored records a restore of path now and returns how long the next
// one waits (0: none); a check is due when that wait is over.
func (b *restoreBackoff) restored(path string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	p := b.files[path]
	if p == nil {
		p = &restorePace{}
		b.files[path] = p
	}
	switch {
	case p.next.IsZero() || now.Sub(p.next) >= b.quiet:
		p.wait = 0
	case p.wait == 0:
		p.wait = b.min
	default:
		p.wait = min(2*p.wait, b.max)
	}
	p.next = now.Add(p.wait)
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.wait > 0 {
		p.timer = time.AfterFunc(p.wait, func() {
			select {
			case b.due <- struct{}{}:
			default: // a check is pending already
			}
		})
	}
	return p.wait
}
