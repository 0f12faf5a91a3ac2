package reconcile

import (
	"time"
)

// eventSink delivers kernel events to the repair loop: one pending event
// is kept, the rest coalesce into it.
type eventSink struct {
	ch chan time.Time
	r  *reconciler
}

func (s eventSink) fire(source string) {
	s.r.metrics.Events.WithLabelValues(source).Inc()
	select {
	case s.ch <- time.Now():
	default:
	}
}

// sourceUp reports whether the event source started: the watching gauge,
// and the reason once when it did not.
func (s eventSink) sourceUp(source string, err error, msg string) {
	if err != nil {
		s.r.metrics.Watching.WithLabelValues(source).Set(0)
		s.r.log.Warn(msg, "source", source, "error", err)
		return
	}
	s.r.metrics.Watching.WithLabelValues(source).Set(1)
}
