package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// PluginType is the type of the rdma-chain entry.
const PluginType = "rdma-chain"

// Upsert returns data with the rdma-chain entry inserted or updated,
// and what changed ("" for nothing). Every other byte is kept.
func Upsert(data []byte, after string, set []byte) ([]byte, string, error) {
	_, plugins, err := Plugins(data)
	if err != nil {
		return nil, "", err
	}
	setNode, err := parseSet(set)
	if err != nil {
		return nil, "", err
	}
	at := EntryIndex(plugins)
	target, err := insertIndex(plugins, at, after)
	if err != nil {
		return nil, "", err
	}
	if at >= 0 {
		old := plugins.Elems[at]
		merged, changed := mergeEntry(data, old, set, setNode)
		if target < 0 {
			if !changed {
				return data, "", nil
			}
			return splice(data, old.Off, old.End, merged), "rdma-chain entry updated", nil
		}
		data = removeElem(data, plugins, at)
		if _, plugins, err = Plugins(data); err != nil {
			return nil, "", err
		}
		target, _ = insertIndex(plugins, -1, after)
		return insertElem(data, plugins, target, merged), "rdma-chain entry moved after " + after, nil
	}
	if target < 0 {
		target = len(plugins.Elems)
	}
	entry := newEntry(set, setNode)
	return insertElem(data, plugins, target, entry), "rdma-chain entry inserted", nil
}

// Plugins parses a conflist and returns its top object and plugins array.
func Plugins(data []byte) (*Node, *Node, error) {
	top, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	plugins, _ := top.Get("plugins")
	if top.Kind != '{' || plugins == nil || plugins.Kind != '[' {
		return nil, nil, errors.New("not a conflist: no plugins array")
	}
	return top, plugins, nil
}

func parseSet(set []byte) (*Node, error) {
	if len(bytes.TrimSpace(set)) == 0 {
		return &Node{Kind: '{'}, nil
	}
	n, err := Parse(set)
	if err != nil {
		return nil, fmt.Errorf("--set must be a JSON object: %w", err)
	}
	if n.Kind != '{' {
		return nil, errors.New("--set must be a JSON object")
	}
	if t, _ := n.Get("type"); t != nil && t.Str != PluginType {
		return nil, errors.New(`--set cannot change "type"`)
	}
	return n, nil
}

// EntryIndex is the index of the rdma-chain entry in plugins, or -1.
func EntryIndex(plugins *Node) int {
	for i, p := range plugins.Elems {
		if t, _ := p.Get("type"); t != nil && t.Str == PluginType {
			return i
		}
	}
	return -1
}

// insertIndex is where the entry must go for --after, or -1 when the
// entry at position at (or a new entry at the end) is placed right.
func insertIndex(plugins *Node, at int, after string) (int, error) {
	if after == "" {
		return -1, nil
	}
	last := -1
	for i, p := range plugins.Elems {
		if t, _ := p.Get("type"); t != nil && t.Str == after && i != at {
			last = i
		}
	}
	if last < 0 {
		return 0, fmt.Errorf("no plugin of type %q to put the entry after", after)
	}
	if at > last {
		return -1, nil
	}
	return last + 1, nil
}

// mergeEntry applies set to the entry old: existing keys keep their order,
// new ones follow; a null removes a key.
func mergeEntry(data []byte, old *Node, set []byte, setNode *Node) ([]byte, bool) {
	var members [][2][]byte
	changed := false
	for _, m := range old.Members {
		val := data[m.Val.Off:m.Val.End]
		if s, _ := setNode.Get(m.Key); s != nil {
			nv := set[s.Off:s.End]
			if !sameJSON(val, nv) {
				changed = true
			}
			if string(nv) == "null" {
				continue
			}
			val = nv
		}
		members = append(members, [2][]byte{Quote(m.Key), val})
	}
	for _, s := range setNode.Members {
		if HasKey(old, s.Key) || string(set[s.Val.Off:s.Val.End]) == "null" {
			continue
		}
		changed = true
		members = append(members, [2][]byte{Quote(s.Key), set[s.Val.Off:s.Val.End]})
	}
	if !changed {
		return data[old.Off:old.End], false
	}
	return RenderObject(members), true
}

func newEntry(set []byte, setNode *Node) []byte {
	members := [][2][]byte{{Quote("type"), Quote(PluginType)}}
	for _, s := range setNode.Members {
		if s.Key != "type" && string(set[s.Val.Off:s.Val.End]) != "null" {
			members = append(members, [2][]byte{Quote(s.Key), set[s.Val.Off:s.Val.End]})
		}
	}
	if !HasKey(setNode, "capabilities") {
		members = append(members, [2][]byte{Quote("capabilities"), []byte(`{"` + config.AnnotationsCapability + `": true}`)})
	}
	return RenderObject(members)
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

func splice(data []byte, from, to int, with []byte) []byte {
	out := make([]byte, 0, len(data)-(to-from)+len(with))
	out = append(out, data[:from]...)
	out = append(out, with...)
	return append(out, data[to:]...)
}

// removeElem cuts element i and one separating comma out of the array.
func removeElem(data []byte, arr *Node, i int) []byte {
	e := arr.Elems[i]
	switch {
	case i > 0:
		return splice(data, arr.Elems[i-1].End, e.End, nil)
	case len(arr.Elems) > 1:
		return splice(data, e.Off, arr.Elems[1].Off, nil)
	default:
		return splice(data, e.Off, e.End, nil)
	}
}

// insertElem inserts entry as element i, indented like its neighbours.
func insertElem(data []byte, arr *Node, i int, entry []byte) []byte {
	if len(arr.Elems) == 0 {
		return splice(data, arr.Off+1, arr.Off+1, entry)
	}
	if i == 0 {
		first := arr.Elems[0]
		return splice(data, first.Off, first.Off, append(append(entry, ','), separator(data, first)...))
	}
	prev := arr.Elems[i-1]
	return splice(data, prev.End, prev.End, append(append([]byte{','}, separator(data, prev)...), entry...))
}

// separator is the whitespace between elements: a newline and the
// element's indentation when it starts its own line, else a space.
func separator(data []byte, e *Node) []byte {
	start := bytes.LastIndexByte(data[:e.Off], '\n') + 1
	indent := data[start:e.Off]
	if len(bytes.Trim(indent, " \t")) == 0 {
		return append([]byte{'\n'}, indent...)
	}
	return []byte{' '}
}

func RenderObject(members [][2][]byte) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(m[0])
		b.WriteString(": ")
		b.Write(m[1])
	}
	b.WriteByte('}')
	return b.Bytes()
}

func Quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
