package grpcunix

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// frame is one HTTP/2 frame; payload is valid until the next read.
type frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

// readFrame reads the next frame; a frame larger than maxFrame is a protocol
// error (the client never allows more).
func (c *client) readFrame() (frame, error) {
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		return frame{}, err
	}
	n := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
	if n > maxFrame {
		return frame{}, protocolError("frame of %d bytes exceeds the maximum frame size %d", n, maxFrame)
	}
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	f := frame{typ: c.hdr[3], flags: c.hdr[4], stream: binary.BigEndian.Uint32(c.hdr[5:]) & (1<<31 - 1), payload: c.buf[:n]}
	_, err := io.ReadFull(c.r, f.payload)
	return f, err
}

// reply is the state of the one stream.
type reply struct {
	headers bool   // the response headers have arrived
	block   []byte // header block being assembled from HEADERS + CONTINUATION
	blockES bool   // the HEADERS frame of block ended the stream
	inBlock bool
	body    []byte
}

// receive reads frames until the stream ends and returns its one message.
func (c *client) receive() ([]byte, error) {
	dec := hpack.NewDecoder(headerTableSize, nil)
	dec.SetMaxStringLength(maxHeaderBlock)
	var r reply
	for {
		f, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if r.inBlock && (f.typ != frameContinuation || f.stream != streamID) {
			return nil, protocolError("frame type %d inside a header block", f.typ)
		}
		done, err := c.handle(&r, f)
		if err != nil || !done {
			if err != nil {
				return nil, err
			}
			continue
		}
		fields, err := dec.DecodeFull(r.block)
		if err != nil {
			return nil, protocolError("decode response headers: %v", err)
		}
		if end, err := r.headerBlock(fields); end || err != nil {
			if err != nil {
				return nil, err
			}
			return c.message(r.body)
		}
	}
}

// handle processes one frame; it returns true when a header block is
// complete in r.block.
func (c *client) handle(r *reply, f frame) (bool, error) {
	switch f.typ {
	case frameSettings:
		return false, c.settings(f)
	case framePing:
		if f.stream != 0 || len(f.payload) != 8 {
			return false, protocolError("malformed PING")
		}
		if f.flags&flagAck == 0 {
			c.ack(appendFrame(nil, framePing, flagAck, 0, f.payload...))
		}
	case frameGoAway:
		return false, goAway(f)
	case frameRSTStream:
		if f.stream == streamID {
			return false, resetStream(f)
		}
	case framePushPromise:
		return false, protocolError("PUSH_PROMISE although push is disabled")
	case frameData:
		return false, r.data(f, c.maxReply)
	case frameHeaders, frameContinuation:
		return r.headerFrame(f)
	}
	// WINDOW_UPDATE, PRIORITY, unknown types: nothing to do for one
	// small request.
	return false, nil
}

func (c *client) settings(f frame) error {
	if f.stream != 0 || len(f.payload)%6 != 0 {
		return protocolError("malformed SETTINGS")
	}
	if f.flags&flagAck == 0 {
		c.ack(appendFrame(nil, frameSettings, flagAck, 0))
	}
	return nil
}

// ack writes a SETTINGS or PING acknowledgement. A failed write is left to
// the next read, which sees the connection's fate.
func (c *client) ack(b []byte) { _, _ = c.conn.Write(b) }

func goAway(f frame) error {
	if f.stream != 0 || len(f.payload) < 8 {
		return protocolError("malformed GOAWAY")
	}
	last := binary.BigEndian.Uint32(f.payload) & (1<<31 - 1)
	if last >= streamID {
		return nil // the server finishes the stream first
	}
	return &Status{Code: Unavailable, Message: fmt.Sprintf("server sent GOAWAY (HTTP/2 error %d) before the call: %s",
		binary.BigEndian.Uint32(f.payload[4:]), f.payload[8:])}
}

// resetStream maps RST_STREAM's error code as grpc-go does.
func resetStream(f frame) error {
	if len(f.payload) != 4 {
		return protocolError("malformed RST_STREAM")
	}
	code := binary.BigEndian.Uint32(f.payload)
	st := &Status{Code: Internal, Message: fmt.Sprintf("stream reset by the server with HTTP/2 error %d", code), Server: true}
	switch code {
	case 0x7: // REFUSED_STREAM
		st.Code = Unavailable
	case 0x8: // CANCEL
		st.Code = Canceled
	case 0xb: // ENHANCE_YOUR_CALM
		st.Code = ResourceExhausted
	case 0xc: // INADEQUATE_SECURITY
		st.Code = PermissionDenied
	}
	return st
}

// unpad strips a padded frame's padding (and HEADERS' priority fields).
func unpad(f frame) ([]byte, error) {
	p := f.payload
	pad := 0
	if f.flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, protocolError("padded frame without a pad length")
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.typ == frameHeaders && f.flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, protocolError("HEADERS too short for its priority fields")
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, protocolError("padding exceeds the frame")
	}
	return p[:len(p)-pad], nil
}

func (r *reply) data(f frame, maxReply int) error {
	if f.stream != streamID || !r.headers {
		return protocolError("DATA on stream %d before the response headers", f.stream)
	}
	p, err := unpad(f)
	if err != nil {
		return err
	}
	if len(r.body)+len(p) > maxReply+5 {
		return &Status{Code: ResourceExhausted, Message: fmt.Sprintf("reply larger than %d bytes", maxReply)}
	}
	r.body = append(r.body, p...)
	if f.flags&flagEndStream != 0 {
		return &Status{Code: Internal, Message: "server ended the stream without trailers"}
	}
	return nil
}

func (r *reply) headerFrame(f frame) (bool, error) {
	if f.stream != streamID {
		return false, protocolError("headers on stream %d", f.stream)
	}
	if f.typ == frameContinuation && !r.inBlock {
		return false, protocolError("CONTINUATION outside a header block")
	}
	p := f.payload
	if f.typ == frameHeaders {
		var err error
		if p, err = unpad(f); err != nil {
			return false, err
		}
		r.block, r.blockES = r.block[:0], f.flags&flagEndStream != 0
	}
	if len(r.block)+len(p) > maxHeaderBlock {
		return false, protocolError("header block exceeds %d bytes", maxHeaderBlock)
	}
	r.block = append(r.block, p...)
	r.inBlock = f.flags&flagEndHeaders == 0
	return !r.inBlock, nil
}

// headerBlock handles a decoded header block: the response headers, the
// trailers, or both at once (a trailers-only reply). It returns true, with
// the call's status as the error, once the stream has ended.
func (r *reply) headerBlock(fields []hpack.HeaderField) (bool, error) {
	first := !r.headers
	r.headers = true
	if !r.blockES {
		if !first {
			return false, protocolError("trailers without END_STREAM")
		}
		return false, checkResponse(fields)
	}
	if first {
		if err := checkResponse(fields); err != nil {
			if _, ok := lookup(fields, "grpc-status"); !ok {
				return true, err
			}
		}
	}
	return true, statusOf(fields)
}

// checkResponse checks the response headers as grpc-go does: HTTP 200 and
// a gRPC content type; other HTTP statuses map to gRPC codes.
func checkResponse(fields []hpack.HeaderField) error {
	s, _ := lookup(fields, ":status")
	if s != "200" {
		code := Unknown
		switch s {
		case "400":
			code = Internal
		case "401":
			code = Unauthenticated
		case "403":
			code = PermissionDenied
		case "404":
			code = Unimplemented
		case "429", "502", "503", "504":
			code = Unavailable
		}
		return &Status{Code: code, Message: "unexpected HTTP status " + strconv.Quote(s)}
	}
	if ct, _ := lookup(fields, "content-type"); !strings.HasPrefix(ct, "application/grpc") {
		return &Status{Code: Unknown, Message: "unexpected content-type " + strconv.Quote(ct)}
	}
	return nil
}

// statusOf reads grpc-status and grpc-message; status 0 gives nil.
func statusOf(fields []hpack.HeaderField) error {
	s, ok := lookup(fields, "grpc-status")
	if !ok {
		return &Status{Code: Internal, Message: "server sent no grpc-status"}
	}
	code, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return &Status{Code: Internal, Message: "malformed grpc-status " + strconv.Quote(s)}
	}
	if code == uint64(OK) {
		return nil
	}
	msg, _ := lookup(fields, "grpc-message")
	return &Status{Code: Code(code), Message: percentDecode(msg), Server: true}
}

func lookup(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// message returns the one length-prefixed message of a unary reply.
func (c *client) message(body []byte) ([]byte, error) {
	if len(body) < 5 {
		return nil, &Status{Code: Internal, Message: fmt.Sprintf("reply of %d bytes holds no message", len(body))}
	}
	if body[0] != 0 {
		return nil, &Status{Code: Internal, Message: "compressed reply, although the client offered no compression"}
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return nil, &Status{Code: Internal, Message: fmt.Sprintf("reply holds %d bytes for a message of %d", len(body)-5, n)}
	}
	return body[5:], nil
}

// percentDecode decodes grpc-message (gRPC's percent-encoding); a malformed
// escape is kept as it is.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
