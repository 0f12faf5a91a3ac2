package podres

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/grpcunix"
)

// The wait before an attempt kubelet refused is drawn at random below a
// window that starts at backoffBase and doubles with each refusal up to
// backoffCap ("full jitter"): the plugins of pods started together then
// spread their calls over kubelet's rate (100 a second) instead of coming
// back together into the same refusals.
const (
	backoffBase = 10 * time.Millisecond
	backoffCap  = time.Second
)

// retry calls get, one attempt at a time, until kubelet answers, an
// attempt fails in a way another attempt would not change, or ctx ends;
// it returns the last attempt's result and the number of attempts. The
// first attempt is bounded by the client's timeout; one that timed out
// (kubelet is there but slow) is asked again at once, given the rest of
// ctx's time: a kubelet starved on a node starting tens of pods answers
// late, and each abandoned call throws away its place in the queue. An
// attempt kubelet refused (its rate limit, a full listen backlog) is
// retried after a backoff. When ctx's deadline comes before the backoff
// ends, retry gives up at once with the refusal; so it does when ctx ends
// during the attempt that follows a refusal: kubelet's last answer was
// that refusal, and the error names it (its rate limit), not the cut.
func (c *Client) retry(ctx context.Context, get func(context.Context) (*podResources, error)) (*podResources, int, error) {
	timeout, refusals := c.timeout, 0
	var refusal error // the last attempt's, when kubelet refused it
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		pod, err := get(actx)
		cancel()
		if err == nil || ended(ctx) {
			if refusal != nil && cut(err) {
				err = refusal
			}
			return pod, attempt, err
		}
		var wait time.Duration
		refusal = nil
		switch {
		case refused(err):
			refusals++
			refusal, wait = err, backoff(refusals)
		case grpcunix.StatusOf(err).Code == grpcunix.DeadlineExceeded:
			timeout = restOf(ctx, 2*timeout)
		default:
			return nil, attempt, err
		}
		if !sleep(ctx, wait) {
			return nil, attempt, err
		}
	}
}

// ended reports whether ctx is done or its deadline has passed: an
// attempt's I/O deadline, set from ctx's, may fire before ctx's own timer
// marks it done, and that attempt's end is the budget's, not kubelet's
// answer.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// cut reports whether err is an attempt's end by its deadline or its
// context, not an answer of kubelet's.
func cut(err error) bool {
	return grpcunix.StatusOf(err).Code == grpcunix.DeadlineExceeded ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// restOf is the time left until ctx's deadline, or otherwise when ctx has
// none.
func restOf(ctx context.Context, otherwise time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return otherwise
}

// refused reports whether kubelet turned the call away without serving
// it, so that the same call later may be served. That is a
// ResourceExhausted sent by the server (kubelet's rate limit; the client's
// own ResourceExhausted, a reply over its limit, would come again), or a
// connect that found the socket's listen backlog full (EAGAIN, from a
// listener that does not accept fast enough, not a missing one).
func refused(err error) bool {
	st := grpcunix.StatusOf(err)
	return (st.Code == grpcunix.ResourceExhausted && st.Server) || errors.Is(err, syscall.EAGAIN)
}

// backoff returns the wait before the attempt that follows the n-th
// refusal (n >= 1).
func backoff(n int) time.Duration {
	window := backoffCap
	if n <= 20 {
		window = min(backoffCap, backoffBase<<(n-1))
	}
	return rand.N(window) + 1
}

// sleep waits d unless ctx ends first or its deadline comes before d has
// passed; it reports whether the wait ran to its end.
func sleep(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
