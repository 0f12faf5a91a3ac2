package podres

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

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
