package podres

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/grpcunix"
)

// TestRefused checks which failures a retry may change: a refusal of
// the server's and a full listen backlog, not the client's own limit, a
// missing kubelet or a timeout (retried apart, with a longer attempt).
func TestRefused(t *testing.T) {
	dialErr := func(errno syscall.Errno) error {
		err := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
		return &grpcunix.Status{Code: grpcunix.Unavailable, Message: err.Error(), Err: err}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"kubelet's rate limit", &grpcunix.Status{Code: grpcunix.ResourceExhausted, Message: "rejected by rate limit", Server: true}, true},
		{"wrapped", fmt.Errorf("ask: %w", &grpcunix.Status{Code: grpcunix.ResourceExhausted, Server: true}), true},
		{"the client's reply limit", &grpcunix.Status{Code: grpcunix.ResourceExhausted, Message: "reply larger than 16 bytes"}, false},
		{"listen backlog full", dialErr(syscall.EAGAIN), true},
		{"connection refused", dialErr(syscall.ECONNREFUSED), false},
		{"no socket", dialErr(syscall.ENOENT), false},
		{"deadline", &grpcunix.Status{Code: grpcunix.DeadlineExceeded}, false},
		{"kubelet's error", &grpcunix.Status{Code: grpcunix.Internal, Server: true}, false},
	}
	for _, tt := range tests {
		if got := refused(tt.err); got != tt.want {
			t.Errorf("%s: refused(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestBackoff checks that the backoff window doubles from backoffBase to
// backoffCap; every wait is positive and within its window.
func TestBackoff(t *testing.T) {
	for n := 1; n <= 64; n++ {
		window := backoffCap
		if n <= 7 {
			window = backoffBase << (n - 1)
		}
		for range 100 {
			if d := backoff(n); d <= 0 || d > window {
				t.Fatalf("backoff(%d) = %v, want in (0, %v]", n, d, window)
			}
		}
	}
}

// TestRetryBudgetEndsAfterRefusal checks that a lookup whose budget ends
// during the attempt after a refusal fails with that refusal (kubelet's
// last answer, which names its rate limit), not with the attempt's cut;
// and that one whose last answer was a timeout, or kubelet gone, fails
// with that.
func TestRetryBudgetEndsAfterRefusal(t *testing.T) {
	limit := &grpcunix.Status{Code: grpcunix.ResourceExhausted, Message: "rejected by rate limit", Server: true}
	slow := &grpcunix.Status{Code: grpcunix.DeadlineExceeded, Message: "i/o timeout"}
	gone := &grpcunix.Status{Code: grpcunix.Unavailable, Message: "connection closed before the reply"}
	tests := []struct {
		name    string
		answers []error // per attempt; past the last, the attempt waits for its context
		last    error   // what that attempt then answers (nil: slow)
		want    grpcunix.Code
	}{
		{"refused, then cut", []error{limit}, nil, grpcunix.ResourceExhausted},
		{"refused thrice, then cut", []error{limit, limit, limit}, nil, grpcunix.ResourceExhausted},
		{"refused, timed out, then cut", []error{limit, slow}, nil, grpcunix.DeadlineExceeded},
		{"cut at once", nil, nil, grpcunix.DeadlineExceeded},
		{"refused, then kubelet gone as the budget ends", []error{limit}, gone, grpcunix.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			n := 0
			_, attempts, err := New("unused", time.Hour).retry(ctx, func(actx context.Context) (*podResources, error) {
				if n++; n <= len(tt.answers) {
					return nil, tt.answers[n-1]
				}
				<-actx.Done()
				if tt.last != nil {
					return nil, tt.last
				}
				return nil, slow
			})
			if got := grpcunix.StatusOf(err).Code; got != tt.want || attempts != len(tt.answers)+1 {
				t.Errorf("after %d attempts: %v (code %v), want code %v after %d", attempts, err, got, tt.want, len(tt.answers)+1)
			}
		})
	}
}

// lateTimer is a context whose deadline passes without it ever being done:
// the instant between an I/O deadline firing and the context's own timer.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// TestRetryBudgetEndsBeforeItsTimer checks that an attempt after a
// refusal, cut by its I/O deadline at the budget's end before the
// context's timer marked it done, still fails with the refusal: it is
// the budget's end, not a timeout of kubelet's (TestRateLimited failed
// so on a loaded host).
func TestRetryBudgetEndsBeforeItsTimer(t *testing.T) {
	limit := &grpcunix.Status{Code: grpcunix.ResourceExhausted, Message: "rejected by rate limit", Server: true}
	slow := &grpcunix.Status{Code: grpcunix.DeadlineExceeded, Message: "write unix: i/o timeout"}
	ctx := lateTimer{Context: context.Background(), deadline: time.Now().Add(100 * time.Millisecond)}
	n := 0
	_, attempts, err := New("unused", time.Hour).retry(ctx, func(actx context.Context) (*podResources, error) {
		if n++; n == 1 {
			return nil, limit
		}
		dl, _ := actx.Deadline()
		time.Sleep(time.Until(dl) + time.Millisecond)
		return nil, slow
	})
	if got := grpcunix.StatusOf(err).Code; got != grpcunix.ResourceExhausted || attempts != 2 {
		t.Errorf("after %d attempts: %v (code %v), want the refusal after 2", attempts, err, got)
	}
}
