package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jnode is a JSON value with the byte offsets it came from, so that
// problems can name file:line:column and untouched values can be copied
// byte for byte.
type jnode struct {
	off, end int // data[off:end] is the value
	members  []jmember
	elems    []*jnode
	kind     byte // '{', '[', or 0 for a scalar
	str      string
	isStr    bool
}

type jmember struct {
	key    string
	keyOff int
	val    *jnode
}

// parseJSON parses data into a tree. A syntax error carries its offset.
func parseJSON(data []byte) (*jnode, error) {
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

func parseValue(dec *json.Decoder, data []byte) (*jnode, error) {
	start := skipSpace(data, int(dec.InputOffset()))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &jnode{off: start}
	switch t := tok.(type) {
	case json.Delim:
		n.kind = byte(t)
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
		n.str, n.isStr = t, true
	}
	n.end = int(dec.InputOffset())
	return n, nil
}

func parseMembers(dec *json.Decoder, data []byte, n *jnode) error {
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
		n.members = append(n.members, jmember{key: key, keyOff: keyOff, val: v})
	}
	return nil
}

func parseElems(dec *json.Decoder, data []byte, n *jnode) error {
	for dec.More() {
		v, err := parseValue(dec, data)
		if err != nil {
			return err
		}
		n.elems = append(n.elems, v)
	}
	return nil
}

// get returns the last member named key (encoding/json's choice among
// duplicates) and its key offset.
func (n *jnode) get(key string) (*jnode, int) {
	if n == nil {
		return nil, 0
	}
	for i := len(n.members) - 1; i >= 0; i-- {
		if n.members[i].key == key {
			return n.members[i].val, n.members[i].keyOff
		}
	}
	return nil, 0
}

// lookup follows a config field path ("sharedLink.type", "devices[1]",
// "runtimeConfig.io.kubernetes.cri.pod-annotations") and returns the offset
// of the deepest key or element it reaches.
func (n *jnode) lookup(path string) int {
	off := n.off
	for path != "" && n != nil {
		if strings.HasPrefix(path, "[") {
			i := strings.IndexByte(path, ']')
			idx, err := strconv.Atoi(path[1:max(i, 1)])
			if i < 0 || err != nil || idx < 0 || idx >= len(n.elems) {
				return off
			}
			n, path = n.elems[idx], path[i+1:]
			off = n.off
		} else {
			m := n.longestKey(path)
			if m == nil {
				return off
			}
			n, off, path = m.val, m.keyOff, path[len(m.key):]
		}
		path = strings.TrimPrefix(path, ".")
	}
	return off
}

func (n *jnode) longestKey(path string) *jmember {
	var best *jmember
	for i := range n.members {
		m := &n.members[i]
		rest, ok := strings.CutPrefix(path, m.key)
		if ok && (rest == "" || rest[0] == '.' || rest[0] == '[') && (best == nil || len(m.key) >= len(best.key)) {
			best = m
		}
	}
	return best
}

// position turns a byte offset into 1-based line and column (in runes).
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[lineStart:]) + 1
}

// syntaxOffset is the offset of a JSON decoding error, or -1.
func syntaxOffset(err error) int {
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

// describe renders a JSON value for a message, shortened.
func describe(data []byte, n *jnode) string {
	s := string(data[n.off:n.end])
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}
