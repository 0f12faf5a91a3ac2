package grpcunix

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// serveRaw answers every connection by reading the client's request (until
// its END_STREAM) and writing reply verbatim, then closing.
func serveRaw(t testing.TB, reply []byte) string {
	t.Helper()
	sock := filepath.Join(testenv.SocketDir(t), "raw.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				readRequest(conn)
				_, _ = conn.Write(reply)
			}()
		}
	}()
	return sock
}

// readRequest consumes the preface and frames up to the request's last DATA.
func readRequest(r io.Reader) {
	pre := make([]byte, len(preface))
	if _, err := io.ReadFull(r, pre); err != nil {
		return
	}
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return
		}
		if hdr[3] == frameData && hdr[4]&flagEndStream != 0 {
			return
		}
	}
}

func headerBlock(t testing.TB, kv ...string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i+1 < len(kv); i += 2 {
		if err := enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func grpcMsg(flag byte, body string) []byte {
	b := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	return append(b, body...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestCallRefusesMalformedReplies checks that replies that break HTTP/2
// or gRPC each give a status, never a reply.
func TestCallRefusesMalformedReplies(t *testing.T) {
	ok := headerBlock(t, ":status", "200", "content-type", "application/grpc")
	trailers := headerBlock(t, "grpc-status", "0")
	settings := appendFrame(nil, frameSettings, 0, 0)
	hdrs := appendFrame(nil, frameHeaders, flagEndHeaders, 1, ok...)
	tr := appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1, trailers...)
	data := func(flags byte, p []byte) []byte { return appendFrame(nil, frameData, flags, 1, p...) }
	big := make([]byte, 9)
	big[0] = 1 // a 65,536-byte frame
	tests := []struct {
		name  string
		reply []byte
		want  Code
	}{
		{"well formed", cat(settings, hdrs, data(0, grpcMsg(0, "hi")), tr), OK},
		{"padded data and ping", cat(settings, appendFrame(nil, framePing, 0, 0, make([]byte, 8)...), hdrs,
			appendFrame(nil, frameData, flagPadded, 1, append(append([]byte{3}, grpcMsg(0, "hi")...), 0, 0, 0)...), tr), OK},
		{"headers split by CONTINUATION", cat(appendFrame(nil, frameHeaders, 0, 1, ok[:3]...),
			appendFrame(nil, frameContinuation, flagEndHeaders, 1, ok[3:]...), data(0, grpcMsg(0, "hi")), tr), OK},
		{"closed without reply", nil, Unavailable},
		{"closed after headers", cat(hdrs, data(0, grpcMsg(0, "hi"))), Unavailable},
		{"oversized frame", cat(big, make([]byte, 100)), Internal},
		{"data before headers", cat(data(0, grpcMsg(0, "hi")), tr), Internal},
		{"data ends the stream", cat(hdrs, data(flagEndStream, grpcMsg(0, "hi"))), Internal},
		{"padding exceeds frame", cat(hdrs, appendFrame(nil, frameData, flagPadded, 1, 200, 1, 2), tr), Internal},
		{"padded frame without length", cat(hdrs, appendFrame(nil, frameData, flagPadded, 1), tr), Internal},
		{"compressed message", cat(hdrs, data(0, grpcMsg(1, "hi")), tr), Internal},
		{"short message", cat(hdrs, data(0, []byte{0, 0, 0}), tr), Internal},
		{"length mismatch", cat(hdrs, data(0, grpcMsg(0, "hi")[:6]), tr), Internal},
		{"two messages", cat(hdrs, data(0, append(grpcMsg(0, "a"), grpcMsg(0, "b")...)), tr), Internal},
		{"no message", cat(hdrs, tr), Internal},
		{"missing grpc-status", cat(hdrs, data(0, grpcMsg(0, "hi")),
			appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1, headerBlock(t, "x", "y")...)), Internal},
		{"malformed grpc-status", cat(hdrs, appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1,
			headerBlock(t, "grpc-status", "zero")...)), Internal},
		{"HTTP 404", appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1, headerBlock(t, ":status", "404")...), Unimplemented},
		{"HTTP 503 then data", cat(appendFrame(nil, frameHeaders, flagEndHeaders, 1, headerBlock(t, ":status", "503")...)), Unavailable},
		{"not gRPC", appendFrame(nil, frameHeaders, flagEndHeaders, 1, headerBlock(t, ":status", "200", "content-type", "text/html")...), Unknown},
		{"trailers-only error", appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1,
			headerBlock(t, ":status", "200", "content-type", "application/grpc", "grpc-status", "5", "grpc-message", "pod%20x%zz")...), NotFound},
		{"the server's own DEADLINE_EXCEEDED, well before ours", appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1,
			headerBlock(t, ":status", "200", "content-type", "application/grpc", "grpc-status", "4")...), DeadlineExceeded},
		{"trailers without END_STREAM", cat(hdrs, data(0, grpcMsg(0, "hi")), hdrs), Internal},
		{"broken HPACK", appendFrame(nil, frameHeaders, flagEndHeaders, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), Internal},
		{"frame inside header block", cat(appendFrame(nil, frameHeaders, 0, 1, ok[:3]...), settings), Internal},
		{"lone CONTINUATION", appendFrame(nil, frameContinuation, flagEndHeaders, 1, ok...), Internal},
		{"headers on stream 3", appendFrame(nil, frameHeaders, flagEndHeaders, 3, ok...), Internal},
		{"push promise", appendFrame(nil, framePushPromise, flagEndHeaders, 1, 0, 0, 0, 2), Internal},
		{"malformed settings", appendFrame(nil, frameSettings, 0, 0, 1, 2, 3), Internal},
		{"malformed ping", appendFrame(nil, framePing, 0, 0, 1), Internal},
		{"reset refused", appendFrame(nil, frameRSTStream, 0, 1, 0, 0, 0, 7), Unavailable},
		{"reset cancel", appendFrame(nil, frameRSTStream, 0, 1, 0, 0, 0, 8), Canceled},
		{"reset enhance your calm", appendFrame(nil, frameRSTStream, 0, 1, 0, 0, 0, 0xb), ResourceExhausted},
		{"reset other", appendFrame(nil, frameRSTStream, 0, 1, 0, 0, 0, 2), Internal},
		{"malformed reset", appendFrame(nil, frameRSTStream, 0, 1, 0, 7), Internal},
		{"goaway before the call", appendFrame(nil, frameGoAway, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), Unavailable},
		{"goaway after the call completes it", cat(appendFrame(nil, frameGoAway, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0),
			hdrs, data(0, grpcMsg(0, "hi")), tr), OK},
		{"headers with priority and padding", cat(appendFrame(nil, frameHeaders, flagEndHeaders|flagPriority|flagPadded, 1,
			append(append([]byte{2, 0, 0, 0, 0, 16}, ok...), 0, 0)...), data(0, grpcMsg(0, "hi")), tr), OK},
		{"reply over the limit", cat(hdrs, data(0, grpcMsg(0, string(make([]byte, 2000)))), tr), ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveRaw(t, tt.reply)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			got, err := Call(ctx, sock, "/pkg.Svc/Do", []byte("q"), 1000)
			if st := StatusOf(err); st.Code != tt.want {
				t.Fatalf("err = %v, want code %s", err, tt.want)
			}
			if tt.want == OK && string(got) != "hi" {
				t.Errorf("reply = %q, want hi", got)
			}
		})
	}
}

// FuzzCallReply checks that whatever the server writes, Call returns
// within its deadline without panicking, and a success carries at most
// maxReply bytes. The deadline is the context's: a server may itself
// answer DEADLINE_EXCEEDED (grpc-status 4), which Call reports as it
// is.
func FuzzCallReply(f *testing.F) {
	ok := headerBlock(f, ":status", "200", "content-type", "application/grpc")
	f.Add(cat(appendFrame(nil, frameHeaders, flagEndHeaders, 1, ok...),
		appendFrame(nil, frameData, 0, 1, grpcMsg(0, "hi")...),
		appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1, headerBlock(f, "grpc-status", "0")...)))
	f.Add(appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream, 1,
		headerBlock(f, ":status", "200", "grpc-status", "12", "grpc-message", "a%41")...))
	f.Fuzz(func(t *testing.T, reply []byte) {
		sock := serveRaw(t, reply)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		got, err := Call(ctx, sock, "/pkg.Svc/Do", []byte("q"), 100)
		if err == nil && len(got) > 100 {
			t.Fatalf("reply of %d bytes exceeds maxReply", len(got))
		}
		if ctx.Err() != nil {
			t.Fatalf("a reply followed by close took until the deadline: %v", err)
		}
	})
}
