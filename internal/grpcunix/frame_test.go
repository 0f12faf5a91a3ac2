package grpcunix

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"golang.org/x/net/http2"
)

// FuzzFrameReaderAgreesWithXNet reads the same bytes with the client's
// frame reader and with x/net's http2.Framer (what grpc-go reads with):
// frame by frame both see the same header and the same payload, both refuse
// an oversized frame, and a padded DATA or HEADERS frame unpads to what the
// Framer gives, or is refused by both.
func FuzzFrameReaderAgreesWithXNet(f *testing.F) {
	ok := headerBlock(f, ":status", "200", "content-type", "application/grpc")
	f.Add(cat(appendFrame(nil, frameSettings, 0, 0, 0, 4, 0, 0, 0xff, 0xff),
		appendFrame(nil, frameHeaders, flagEndHeaders, 1, ok...),
		appendFrame(nil, frameData, flagPadded, 1, append([]byte{2}, append(grpcMsg(0, "hi"), 0, 0)...)...),
		appendFrame(nil, frameHeaders, flagEndHeaders|flagEndStream|flagPadded|flagPriority, 1,
			append(append([]byte{1, 0, 0, 0, 3, 16}, headerBlock(f, "grpc-status", "0")...), 0)...)))
	f.Add(appendFrame(nil, frameData, flagPadded, 1, 9, 1, 2))
	f.Add(append([]byte{0, 0x40, 1}, make([]byte, 6)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &client{r: bufio.NewReader(bytes.NewReader(in))}
		fr := http2.NewFramer(nil, bytes.NewReader(in))
		fr.SetMaxReadFrameSize(maxFrame) // the client's SETTINGS_MAX_FRAME_SIZE
		// Frame order (CONTINUATION after HEADERS) is receive's rule, tested
		// with whole replies; this compares the reading of single frames.
		fr.AllowIllegalReads = true
		for i := 0; ; i++ {
			want, werr := fr.ReadFrame()
			got, err := c.readFrame()
			if !agree(t, i, got, err, want, werr) {
				return
			}
		}
	})
}

// agree compares frame i as both readers saw it; it returns whether both
// read a whole frame and the next one is worth comparing.
func agree(t *testing.T, i int, got frame, err error, want http2.Frame, werr error) bool {
	var ce http2.ConnectionError
	var se http2.StreamError
	outOfInput := errors.Is(werr, io.EOF) || errors.Is(werr, io.ErrUnexpectedEOF)
	switch {
	case outOfInput && err != nil:
		return false
	case errors.Is(werr, http2.ErrFrameTooLarge):
		if err == nil {
			t.Fatalf("frame %d: read a %d-byte frame the Framer refused as too large", i, len(got.payload))
		}
		return false
	case err != nil:
		t.Fatalf("frame %d: %v, where the Framer read %v (%v)", i, err, want, werr)
	case outOfInput || errors.As(werr, &ce) || errors.As(werr, &se):
		// The whole frame was read; the Framer refused its contents (a
		// padded frame too short for its pad length ends its payload
		// early). Padding is the one content rule the client shares.
		if (got.typ == frameData || got.typ == frameHeaders) && padRefused(got) {
			if _, perr := unpad(got); perr == nil {
				t.Fatalf("frame %d: unpadded a frame the Framer refused: %v", i, werr)
			}
		}
		return false
	case werr != nil:
		t.Fatalf("frame %d: Framer error %v", i, werr)
	}
	h := want.Header()
	if got.typ != byte(h.Type) || got.flags != byte(h.Flags) || got.stream != h.StreamID || uint32(len(got.payload)) != h.Length {
		t.Fatalf("frame %d: header type %d flags %#x stream %d length %d, Framer %v", i, got.typ, got.flags, got.stream, len(got.payload), h)
	}
	var body []byte
	switch w := want.(type) {
	case *http2.DataFrame:
		body = w.Data()
	case *http2.HeadersFrame:
		body = w.HeaderBlockFragment()
	default:
		return true
	}
	p, perr := unpad(got)
	if perr != nil || !bytes.Equal(p, body) {
		t.Fatalf("frame %d: unpadded %x (%v), Framer %x", i, p, perr, body)
	}
	return true
}

// padRefused reports whether a DATA or HEADERS frame's padding (and
// HEADERS' priority fields) cannot fit its payload, the Framer's rule.
func padRefused(f frame) bool {
	n, need := len(f.payload), 0
	if f.flags&flagPadded != 0 {
		if n < 1 {
			return true
		}
		need += 1 + int(f.payload[0])
	}
	if f.typ == frameHeaders && f.flags&flagPriority != 0 {
		need += 5
	}
	return need > n
}
