package grpcunix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 frame types and flags (RFC 9113 section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

const (
	preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// maxFrame is the largest frame either side may send: the protocol's
	// default, which the client never raises.
	maxFrame = 16384
	// window is the flow-control window the client grants, so the server
	// never waits for a WINDOW_UPDATE; the reply size is bounded by the
	// caller's maxReply instead.
	window = 1<<31 - 1
	// defaultWindow is the window each side starts with.
	defaultWindow = 65535
	// maxHeaderBlock bounds one decoded header block from the server.
	maxHeaderBlock = 64 << 10
	// headerTableSize is HTTP/2's default SETTINGS_HEADER_TABLE_SIZE, which
	// the client never changes: the server's HPACK encoder may use that much.
	headerTableSize = 4096
	streamID        = 1
)

// Call sends req (an encoded protobuf message) to method (for example
// "/v1.PodResourcesLister/Get") of the gRPC server on the unix socket and
// returns the reply message. A reply larger than maxReply bytes is refused.
// Every error is a *Status: Unavailable when the socket cannot be reached or
// the connection breaks, DeadlineExceeded/Canceled when ctx ends, the
// server's code otherwise.
func Call(ctx context.Context, socket, method string, req []byte, maxReply int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fromContext(err)
	}
	// DialUnix, not a net.Dialer: the Dialer's address resolution links the
	// DNS resolver (250 KB of the plugin binary) for a path. A unix connect
	// does not wait: a full backlog answers EAGAIN at once.
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fromContext(ctx.Err())
		}
		return nil, &Status{Code: Unavailable, Message: err.Error(), Err: err}
	}
	defer func() { _ = conn.Close() }() // after the reply is read, close errors change nothing
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl) // a unix socket's deadline cannot fail to set
	}
	// A cancel wakes a blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c := &client{conn: conn, r: bufio.NewReaderSize(conn, 4096), maxReply: maxReply}
	if err = c.send(ctx, method, req); err == nil {
		var reply []byte
		if reply, err = c.receive(); err == nil {
			return reply, nil
		}
	}
	return nil, classify(ctx, err)
}

// classify turns an error of the exchange into a *Status.
func classify(ctx context.Context, err error) error {
	var st *Status
	dl, hasDeadline := ctx.Deadline()
	switch {
	case ctx.Err() != nil:
		return fromContext(ctx.Err())
	case errors.As(err, &st) && st.Code == Canceled && hasDeadline && !time.Now().Before(dl):
		// The server cancelled the stream at the deadline the client sent
		// (grpc-go reads this the same way).
		return &Status{Code: DeadlineExceeded, Message: st.Message, Err: context.DeadlineExceeded}
	case errors.As(err, &st):
		return st
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &Status{Code: DeadlineExceeded, Message: err.Error(), Err: err}
	}
	// EOF, reset, broken pipe: the connection went away, as grpc-go reports
	// transport failures.
	return &Status{Code: Unavailable, Message: "connection closed before the reply: " + err.Error(), Err: err}
}

func fromContext(err error) *Status {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Status{Code: DeadlineExceeded, Message: err.Error(), Err: err}
	}
	return &Status{Code: Canceled, Message: err.Error(), Err: err}
}

type client struct {
	conn     net.Conn
	r        *bufio.Reader // a read takes all the frames the server has sent
	maxReply int
	hdr      [9]byte
	buf      []byte
}

// send writes the connection preface, the client's settings, a connection
// window update and the request stream in one write.
func (c *client) send(ctx context.Context, method string, req []byte) error {
	msg := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(req)))
	msg = append(msg, req...)
	if len(msg) > defaultWindow {
		// The server's initial window; requests here are a few bytes.
		return &Status{Code: ResourceExhausted, Message: fmt.Sprintf("request of %d bytes exceeds the initial HTTP/2 window", len(req))}
	}
	block, err := requestHeaders(ctx, method)
	if err != nil {
		return err
	}
	b := append(make([]byte, 0, 256+len(msg)), preface...)
	settings := []byte{0, 2, 0, 0, 0, 0}                                     // SETTINGS_ENABLE_PUSH = 0
	settings = binary.BigEndian.AppendUint32(append(settings, 0, 4), window) // SETTINGS_INITIAL_WINDOW_SIZE
	b = appendFrame(b, frameSettings, 0, 0, settings...)
	b = appendFrame(b, frameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, window-defaultWindow)...)
	b = appendFrame(b, frameHeaders, flagEndHeaders, streamID, block...)
	for len(msg) > 0 {
		n := min(len(msg), maxFrame)
		var flags byte
		if n == len(msg) {
			flags = flagEndStream
		}
		b = appendFrame(b, frameData, flags, streamID, msg[:n]...)
		msg = msg[n:]
	}
	_, err = c.conn.Write(b)
	return err
}

// requestHeaders encodes the request's header block; grpc-timeout carries
// ctx's deadline so the server gives up when the client does.
func requestHeaders(ctx context.Context, method string) ([]byte, error) {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method},
		{Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "rdma-chain"},
	}
	if dl, ok := ctx.Deadline(); ok {
		// Rounded up: the server's deadline never comes before the client's.
		ms := max((time.Until(dl)+time.Millisecond-1)/time.Millisecond, 1)
		if ms < 1e8 {
			fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: strconv.FormatInt(int64(ms), 10) + "m"})
		}
	}
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			return nil, &Status{Code: Internal, Message: "encode request headers: " + err.Error(), Err: err}
		}
	}
	if b.Len() > maxFrame {
		return nil, &Status{Code: Internal, Message: "request headers exceed one HTTP/2 frame"}
	}
	return b.Bytes(), nil
}

func appendFrame(b []byte, typ, flags byte, stream uint32, payload ...byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
	return append(b, payload...)
}
