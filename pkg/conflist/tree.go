package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Node is a JSON value with the byte offsets it came from, so that
// problems can name file:line:column and untouched values can be copied
// byte for byte.
type Node struct {
	Off, End int // data[Off:End] is the value
	Members  []Member
	Elems    []*Node
	Kind     byte // '{', '[', or 0 for a scalar
	Str      string
	IsStr    bool
}

// Member is one key of an object and its value.
type Member struct {
	Key    string
	KeyOff int
	Val    *Node
}

// Parse parses data into a tree. A syntax error carries its offset.
func Parse(data []byte) (*Node, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec, data)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level value")
	}
	return n, nil
}

// skipSpace returns the offset of the next token at or after off.
func skipSpace(data []byte, off int) int {
	for off < len(data) && strings.IndexByte(" \t\r\n,:", data[off]) >= 0 {
		off++
	}
	return off
}

func parseValue(dec *json.Decoder, data []byte) (*Node, error) {
	start := skipSpace(data, int(dec.InputOffset()))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &Node{Off: start}
	switch t := tok.(type) {
	case json.Delim:
		n.Kind = byte(t)
		if t == '{' {
			err = parseMembers(dec, data, n)
		} else {
			err = parseElems(dec, data, n)
		}
		if err != nil {
			return nil, err
		}
		if _, err := dec.Token(); err != nil { // closing delimiter
			return nil, err
		}
	case string:
		n.Str, n.IsStr = t, true
	}
	n.End = int(dec.InputOffset())
	return n, nil
}

func parseMembers(dec *json.Decoder, data []byte, n *Node) error {
	for dec.More() {
		keyOff := skipSpace(data, int(dec.InputOffset()))
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		v, err := parseValue(dec, data)
		if err != nil {
			return err
		}
		n.Members = append(n.Members, Member{Key: key, KeyOff: keyOff, Val: v})
	}
	return nil
}

func parseElems(dec *json.Decoder, data []byte, n *Node) error {
	for dec.More() {
		v, err := parseValue(dec, data)
		if err != nil {
			return err
		}
		n.Elems = append(n.Elems, v)
	}
	return nil
}

// Get returns the last member named key (encoding/json's choice among
// duplicates) and its key offset.
func (n *Node) Get(key string) (*Node, int) {
	if n == nil {
		return nil, 0
	}
	for i := len(n.Members) - 1; i >= 0; i-- {
		if n.Members[i].Key == key {
			return n.Members[i].Val, n.Members[i].KeyOff
		}
	}
	return nil, 0
}

// Lookup follows a config field path ("sharedLink.type", "devices[1]",
// "runtimeConfig.io.kubernetes.cri.pod-annotations") and returns the offset
// of the deepest key or element it reaches.
func (n *Node) Lookup(path string) int {
	off := n.Off
	for path != "" && n != nil {
		if strings.HasPrefix(path, "[") {
			i := strings.IndexByte(path, ']')
			idx, err := strconv.Atoi(path[1:max(i, 1)])
			if i < 0 || err != nil || idx < 0 || idx >= len(n.Elems) {
				return off
			}
			n, path = n.Elems[idx], path[i+1:]
			off = n.Off
		} else {
			m := n.longestKey(path)
			if m == nil {
				return off
			}
			n, off, path = m.Val, m.KeyOff, path[len(m.Key):]
		}
		path = strings.TrimPrefix(path, ".")
	}
	return off
}

func (n *Node) longestKey(path string) *Member {
	var best *Member
	for i := range n.Members {
		m := &n.Members[i]
		rest, ok := strings.CutPrefix(path, m.Key)
		if ok && (rest == "" || rest[0] == '.' || rest[0] == '[') && (best == nil || len(m.Key) >= len(best.Key)) {
			best = m
		}
	}
	return best
}

// Position turns a byte offset into 1-based line and column (in runes).
func Position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[lineStart:]) + 1
}

// Positions turns ascending byte offsets of one document into lines and
// columns in one pass over it: for many offsets in order, Position would
// rescan from the start for each.
type Positions struct {
	data           []byte
	off, line, col int
}

// NewPositions starts at the beginning of data.
func NewPositions(data []byte) *Positions { return &Positions{data: data, line: 1, col: 1} }

// At returns the 1-based line and column (in runes) of off; an offset
// before the previous one starts again from the beginning.
func (p *Positions) At(off int) (line, col int) {
	off = min(max(off, 0), len(p.data))
	if off < p.off {
		p.off, p.line, p.col = 0, 1, 1
	}
	for p.off < off {
		r, size := utf8.DecodeRune(p.data[p.off:off])
		if r == '\n' {
			p.line, p.col = p.line+1, 1
		} else {
			p.col++
		}
		p.off += size
	}
	return p.line, p.col
}

// SyntaxOffset is the offset of a JSON decoding error, or -1.
func SyntaxOffset(err error) int {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return int(se.Offset)
	case errors.As(err, &te):
		return int(te.Offset)
	}
	return -1
}

// Describe renders a JSON value for a message, shortened.
func Describe(data []byte, n *Node) string {
	s := string(data[n.Off:n.End])
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

// HasKey reports whether the object n has the member k.
func HasKey(n *Node, k string) bool {
	v, _ := n.Get(k)
	return v != nil
}
