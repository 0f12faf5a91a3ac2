package grpcunix

import (
	"errors"
	"fmt"
	"sync"
)

// HPACK (RFC 7541) for one call's header blocks. The client encodes its
// request headers as literals (no table, no Huffman: valid HPACK any
// decoder reads) and decodes the server's blocks with the static and
// dynamic tables and Huffman strings.
//
// Why not golang.org/x/net/http2/hpack: its package init builds the static
// table's maps on every plugin start, and its Huffman decoder builds a tree
// of 256-way nodes on first use; both cost a fresh process 0.4-0.6 ms of a
// 1-2 ms lookup. The HPACK tests compare this decoder with x/net's on its
// encoder's output and on fuzzed blocks.

// field is one header field.
type field struct{ name, value string }

// staticTable is RFC 7541 Appendix A; index 1 is staticTable[0].
var staticTable = [...]field{
	{":authority", ""}, {":method", "GET"}, {":method", "POST"}, {":path", "/"},
	{":path", "/index.html"}, {":scheme", "http"}, {":scheme", "https"}, {":status", "200"},
	{":status", "204"}, {":status", "206"}, {":status", "304"}, {":status", "400"},
	{":status", "404"}, {":status", "500"}, {"accept-charset", ""}, {"accept-encoding", "gzip, deflate"},
	{"accept-language", ""}, {"accept-ranges", ""}, {"accept", ""}, {"access-control-allow-origin", ""},
	{"age", ""}, {"allow", ""}, {"authorization", ""}, {"cache-control", ""},
	{"content-disposition", ""}, {"content-encoding", ""}, {"content-language", ""}, {"content-length", ""},
	{"content-location", ""}, {"content-range", ""}, {"content-type", ""}, {"cookie", ""},
	{"date", ""}, {"etag", ""}, {"expect", ""}, {"expires", ""},
	{"from", ""}, {"host", ""}, {"if-match", ""}, {"if-modified-since", ""},
	{"if-none-match", ""}, {"if-range", ""}, {"if-unmodified-since", ""}, {"last-modified", ""},
	{"link", ""}, {"location", ""}, {"max-forwards", ""}, {"proxy-authenticate", ""},
	{"proxy-authorization", ""}, {"range", ""}, {"referer", ""}, {"refresh", ""},
	{"retry-after", ""}, {"server", ""}, {"set-cookie", ""}, {"strict-transport-security", ""},
	{"transfer-encoding", ""}, {"user-agent", ""}, {"vary", ""}, {"via", ""},
	{"www-authenticate", ""},
}

// appendLiteral appends a "literal header field without indexing - new
// name" representation with raw (non-Huffman) strings.
func appendLiteral(b []byte, name, value string) []byte {
	b = append(b, 0)
	b = appendString(b, name)
	return appendString(b, value)
}

func appendString(b []byte, s string) []byte {
	b = appendInt(b, 7, 0, uint64(len(s)))
	return append(b, s...)
}

// appendInt appends x as an HPACK integer with an n-bit prefix whose high
// bits are flags.
func appendInt(b []byte, n uint, flags byte, x uint64) []byte {
	max := uint64(1)<<n - 1
	if x < max {
		return append(b, flags|byte(x))
	}
	b = append(b, flags|byte(max))
	for x -= max; x >= 128; x >>= 7 {
		b = append(b, byte(x)|0x80)
	}
	return append(b, byte(x))
}

// decoder holds the dynamic table of one connection's server-to-client
// direction.
type decoder struct {
	dynamic []field // newest first
	size    int     // RFC 7541 section 4.1: sum of len(name)+len(value)+32
	maxSize int     // the current limit, at most settingsTableSize
}

// settingsTableSize is SETTINGS_HEADER_TABLE_SIZE, the protocol's default,
// which the client never changes.
const settingsTableSize = 4096

var errHPACK = errors.New("malformed HPACK block")

// decode decodes one complete header block.
func (d *decoder) decode(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		var f field
		var err error
		switch c := b[0]; {
		case c&0x80 != 0: // indexed field
			var i uint64
			if i, b, err = readInt(b, 7); err == nil {
				f, err = d.at(i)
			}
		case c&0xc0 == 0x40: // literal with incremental indexing
			if f, b, err = d.literal(b, 6); err == nil {
				d.add(f)
			}
		case c&0xe0 == 0x20: // dynamic table size update
			// Only at the start of a block (RFC 7541 4.2); like x/net,
			// tolerated later while the table is empty.
			if len(out) > 0 && d.size > 0 {
				return nil, fmt.Errorf("%w: table size update after a field", errHPACK)
			}
			b, err = d.resize(b)
			if err != nil {
				return nil, err
			}
			continue
		default: // literal without indexing (0000) or never indexed (0001)
			f, b, err = d.literal(b, 4)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func (d *decoder) resize(b []byte) ([]byte, error) {
	n, b, err := readInt(b, 5)
	if err != nil {
		return nil, err
	}
	if n > settingsTableSize {
		return nil, fmt.Errorf("%w: table size %d exceeds %d", errHPACK, n, settingsTableSize)
	}
	d.maxSize = int(n)
	d.evict()
	return b, nil
}

// at returns the field at index i of the static and dynamic tables.
func (d *decoder) at(i uint64) (field, error) {
	switch {
	case i >= 1 && i <= uint64(len(staticTable)):
		return staticTable[i-1], nil
	case i > uint64(len(staticTable)) && i-uint64(len(staticTable)) <= uint64(len(d.dynamic)):
		return d.dynamic[i-uint64(len(staticTable))-1], nil
	}
	return field{}, fmt.Errorf("%w: index %d out of range", errHPACK, i)
}

// literal reads a literal field whose name index has an n-bit prefix.
func (d *decoder) literal(b []byte, n uint) (field, []byte, error) {
	i, b, err := readInt(b, n)
	if err != nil {
		return field{}, nil, err
	}
	var f field
	if i == 0 {
		if f.name, b, err = readString(b); err != nil {
			return field{}, nil, err
		}
	} else {
		named, err := d.at(i)
		if err != nil {
			return field{}, nil, err
		}
		f.name = named.name
	}
	f.value, b, err = readString(b)
	return f, b, err
}

// add inserts f into the dynamic table, evicting the oldest entries.
func (d *decoder) add(f field) {
	d.dynamic = append([]field{f}, d.dynamic...)
	d.size += len(f.name) + len(f.value) + 32
	d.evict()
}

func (d *decoder) evict() {
	for d.size > d.maxSize && len(d.dynamic) > 0 {
		last := d.dynamic[len(d.dynamic)-1]
		d.size -= len(last.name) + len(last.value) + 32
		d.dynamic = d.dynamic[:len(d.dynamic)-1]
	}
}

// readInt reads an HPACK integer with an n-bit prefix (RFC 7541 5.1).
func readInt(b []byte, n uint) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, nil, errHPACK
	}
	max := uint64(1)<<n - 1
	x := uint64(b[0]) & max
	b = b[1:]
	if x < max {
		return x, b, nil
	}
	for shift := uint(0); len(b) > 0; shift += 7 {
		if shift > 28 {
			return 0, nil, fmt.Errorf("%w: integer too large", errHPACK)
		}
		c := b[0]
		b = b[1:]
		x += uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return x, b, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: truncated integer", errHPACK)
}

// readString reads a string literal, raw or Huffman-coded (RFC 7541 5.2).
func readString(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errHPACK
	}
	huffman := b[0]&0x80 != 0
	n, b, err := readInt(b, 7)
	if err != nil {
		return "", nil, err
	}
	if n > uint64(len(b)) {
		return "", nil, fmt.Errorf("%w: string past the block", errHPACK)
	}
	s, rest := b[:n], b[n:]
	if !huffman {
		return string(s), rest, nil
	}
	out, err := huffmanDecode(s)
	return out, rest, err
}

// huffmanCodeLen is the code length of each symbol of RFC 7541 Appendix B
// (EOS, symbol 256, is 30 bits). The code is canonical: within a length,
// codes ascend with the symbol, and the first code of a length follows the
// last of the shorter one; huffmanDecode relies on that (tested against
// x/net's encoder).
var huffmanCodeLen = [256]uint8{
	13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
	28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
	6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
	5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
	13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
	7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
	15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
	6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
	20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
	24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
	22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
	21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
	26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
	19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
	20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
	26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
}

const eosLen = 30

// canonical is the decoding table of a canonical code: per length, the
// first code and the index of its first symbol in symbols (sorted by
// length, then symbol).
type canonical struct {
	first, offset, count [eosLen + 1]uint32
	symbols              [257]uint16
}

var huffmanTable = sync.OnceValue(func() *canonical {
	t := &canonical{}
	n := 0
	for l := uint32(1); l <= eosLen; l++ {
		t.offset[l] = uint32(n)
		for sym := 0; sym <= 256; sym++ {
			if symLen(sym) == l {
				t.symbols[n] = uint16(sym)
				n++
			}
		}
		t.count[l] = uint32(n) - t.offset[l]
		if l < eosLen {
			t.first[l+1] = (t.first[l] + t.count[l]) << 1
		}
	}
	return t
})

func symLen(sym int) uint32 {
	if sym == 256 {
		return eosLen
	}
	return uint32(huffmanCodeLen[sym])
}

// huffmanDecode decodes a Huffman-coded string: EOS inside it, or padding
// longer than 7 bits or not all ones, is an error (RFC 7541 5.2).
func huffmanDecode(b []byte) (string, error) {
	t := huffmanTable()
	out := make([]byte, 0, len(b)*8/5)
	var code, length uint32
	for _, c := range b {
		for i := 7; i >= 0; i-- {
			code = code<<1 | uint32(c>>uint(i))&1
			length++
			if k := code - t.first[length]; code >= t.first[length] && k < t.count[length] {
				sym := t.symbols[t.offset[length]+k]
				if sym == 256 {
					return "", fmt.Errorf("%w: EOS in a Huffman string", errHPACK)
				}
				out = append(out, byte(sym))
				code, length = 0, 0
			} else if length >= eosLen {
				return "", fmt.Errorf("%w: invalid Huffman code", errHPACK)
			}
		}
	}
	if length > 7 || code != 1<<length-1 {
		return "", fmt.Errorf("%w: invalid Huffman padding", errHPACK)
	}
	return string(out), nil
}
