package grpcunix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// rawCodec passes messages through unencoded, so the handler sees the bytes
// the client sent and the client the bytes the handler returns.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	return *(v.(*[]byte)), nil
}
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}

// handler answers one call: the method, the request and its metadata in,
// the reply or a status error out.
type handler func(ctx context.Context, method string, req []byte) ([]byte, error)

// serveGRPC runs grpc-go's server (what kubelet and containerd run) with h
// for every method, and returns its socket.
func serveGRPC(t *testing.T, h handler, opts ...grpc.ServerOption) string {
	t.Helper()
	sock := filepath.Join(testenv.SocketDir(t), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(stream)
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			reply, err := h(stream.Context(), method, req)
			if err != nil {
				return err
			}
			return stream.SendMsg(&reply)
		}))
	srv := grpc.NewServer(opts...)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return sock
}

func TestCallAgainstGRPCServer(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // 1.6 MB: many DATA frames
	tests := []struct {
		name     string
		req      []byte
		h        handler
		maxReply int
		want     []byte
		code     Code
		msg      string
		client   bool // the code is the client's own, not the server's
	}{
		{name: "echo", req: []byte("hello"), want: []byte("method /pkg.Svc/Do got hello"),
			h: func(_ context.Context, m string, req []byte) ([]byte, error) {
				return []byte("method " + m + " got " + string(req)), nil
			}},
		{name: "empty request and reply", req: nil, want: []byte{},
			h: func(context.Context, string, []byte) ([]byte, error) { return nil, nil }},
		{name: "large reply", req: []byte("x"), want: big,
			h: func(context.Context, string, []byte) ([]byte, error) { return big, nil }},
		{name: "reply over the limit", req: []byte("x"), maxReply: len(big) - 1, code: ResourceExhausted, client: true,
			h: func(context.Context, string, []byte) ([]byte, error) { return big, nil }},
		{name: "the server's rate limit", req: []byte("x"), code: ResourceExhausted, msg: "rejected by rate limit",
			h: func(context.Context, string, []byte) ([]byte, error) {
				return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
			}},
		{name: "status with message", req: []byte("x"), code: NotFound, msg: "pod web in namespace default not found",
			h: func(context.Context, string, []byte) ([]byte, error) {
				return nil, status.Error(codes.NotFound, "pod web in namespace default not found")
			}},
		{name: "plain error is Unknown", req: []byte("x"), code: Unknown, msg: "PodResources API Get method disabled",
			h: func(context.Context, string, []byte) ([]byte, error) {
				return nil, errors.New("PodResources API Get method disabled")
			}},
		{name: "message needing percent-encoding", req: []byte("x"), code: Internal, msg: "100% broken: ü\n\"x\"",
			h: func(context.Context, string, []byte) ([]byte, error) {
				return nil, status.Error(codes.Internal, "100% broken: ü\n\"x\"")
			}},
		{name: "unknown code passes through", req: []byte("x"), code: Code(42), msg: "odd",
			h: func(context.Context, string, []byte) ([]byte, error) { return nil, status.Error(codes.Code(42), "odd") }},
		{name: "headers and trailers with metadata", req: []byte("x"), want: []byte("ok"),
			h: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
				stream := grpc.ServerTransportStreamFromContext(ctx)
				_ = stream.SetHeader(metadata.Pairs("x-a", strings.Repeat("a", 5000)))
				_ = stream.SetTrailer(metadata.Pairs("x-b", "b"))
				return []byte("ok"), nil
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveGRPC(t, tt.h, grpc.MaxSendMsgSize(8<<20))
			maxReply := tt.maxReply
			if maxReply == 0 {
				maxReply = 4 << 20
			}
			got, err := Call(context.Background(), sock, "/pkg.Svc/Do", tt.req, maxReply)
			if tt.code != OK {
				st := StatusOf(err)
				if st.Code != tt.code || (tt.msg != "" && st.Message != tt.msg) || st.Server == tt.client {
					t.Fatalf("err = %v (from the server: %v), want code %s message %q from the server: %v", err, st.Server, tt.code, tt.msg, !tt.client)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("reply = %.60q (%d bytes), want %.60q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

// TestCallDeadline checks that the server sees the client's deadline
// (grpc-timeout) and the client gives up at it, against a server that never
// answers.
func TestCallDeadline(t *testing.T) {
	seen := make(chan time.Duration, 1)
	sock := serveGRPC(t, func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		dl, _ := ctx.Deadline()
		seen <- time.Until(dl)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Call(ctx, sock, "/pkg.Svc/Hang", []byte("x"), 1<<20)
	if StatusOf(err).Code != DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Call returned after %v for a 300ms deadline", d)
	}
	if d := <-seen; d <= 0 || d > 300*time.Millisecond {
		t.Errorf("server saw a deadline %v away, want within 300ms", d)
	}
}

func TestCallCanceled(t *testing.T) {
	sock := serveGRPC(t, func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := Call(ctx, sock, "/pkg.Svc/Hang", nil, 1<<20); StatusOf(err).Code != Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
}

func TestCallUnreachable(t *testing.T) {
	dir := testenv.SocketDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(dir, "closed.sock")
	lis, err := net.Listen("unix", closed)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	for _, sock := range []string{filepath.Join(dir, "missing.sock"), file, closed} {
		_, err := Call(context.Background(), sock, "/pkg.Svc/Do", nil, 1<<20)
		if st := StatusOf(err); st.Code != Unavailable || st.Err == nil {
			t.Errorf("Call(%s) err = %v, want Unavailable with its cause", sock, err)
		}
	}
}

// TestCallClosesConnections checks that many calls one after another
// leave no descriptor behind.
func TestCallClosesConnections(t *testing.T) {
	sock := serveGRPC(t, func(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil })
	before := openFDs(t)
	for i := 0; i < 50; i++ {
		if _, err := Call(context.Background(), sock, "/pkg.Svc/Do", nil, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after > before+2 {
		t.Errorf("open descriptors went from %d to %d over 50 calls", before, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestStatusOf(t *testing.T) {
	if c := StatusOf(nil).Code; c != OK {
		t.Errorf("StatusOf(nil) = %s", c)
	}
	wrapped := fmt.Errorf("ask: %w", &Status{Code: NotFound, Message: "m"})
	if st := StatusOf(wrapped); st.Code != NotFound || st.Message != "m" {
		t.Errorf("StatusOf(wrapped) = %+v", st)
	}
	if st := StatusOf(errors.New("x")); st.Code != Unknown {
		t.Errorf("StatusOf(plain) = %+v", st)
	}
	if s := Code(99).String(); s != "Code(99)" {
		t.Errorf("Code(99) = %s", s)
	}
}
