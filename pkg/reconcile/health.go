package reconcile

import (
	"fmt"
	"sync"
	"time"
)

// criHealth remembers when CRI last answered, for /healthz: a runtime
// restart leaves a bind-mounted socket file dead, and every pass then
// releases nothing; the probe restarts the pod.
type criHealth struct {
	grace time.Duration

	mu      sync.Mutex
	lastOK  time.Time
	lastErr error
}

// observe records the outcome of one CRI call made at now.
func (h *criHealth) observe(now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err == nil {
		h.lastOK = now
	}
}

// healthy fails once CRI at socket ("" : not used) has not answered for
// longer than the grace.
func (h *criHealth) healthy(socket string, now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if socket == "" || h.lastErr == nil {
		return nil
	}
	if down := now.Sub(h.lastOK); down > h.grace {
		return fmt.Errorf("CRI at %s unreachable for %s (longer than --liveness-grace %s): %w", socket, down.Round(time.Second), h.grace, h.lastErr)
	}
	return nil
}
