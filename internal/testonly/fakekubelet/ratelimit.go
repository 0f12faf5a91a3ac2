package fakekubelet

import (
	"context"
	"sync/atomic"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kubelet's default pod-resources rate limit (its podresources/grpc
// DefaultQPS and DefaultBurstTokens).
const (
	KubeletQPS   = 100
	KubeletBurst = 10
)

// Limiter is kubelet's pod-resources rate limit: a token bucket
// (x/time/rate) checked by a unary server interceptor before the handler,
// refusing a call it does not allow with ResourceExhausted "rejected by rate
// limit", as kubelet's LimiterUnaryServerInterceptor does
// (pkg/kubelet/apis/podresources/grpc/ratelimit.go). It counts what it
// served and refused.
type Limiter struct {
	bucket          *rate.Limiter
	Served, Refused atomic.Int64
}

// NewLimiter returns a limiter at kubelet's defaults.
func NewLimiter() *Limiter {
	return &Limiter{bucket: rate.NewLimiter(KubeletQPS, KubeletBurst)}
}

// ServerOption installs the limiter on a grpc-go server.
func (l *Limiter) ServerOption() grpc.ServerOption {
	return grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !l.bucket.Allow() {
			l.Refused.Add(1)
			return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
		}
		l.Served.Add(1)
		return handler(ctx, req)
	})
}
