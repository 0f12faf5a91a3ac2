package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// cniKeys are the keys every CNI plugin's entry may carry, which the
// configuration table leaves to the CNI specification.
var cniKeys = []string{"cniVersion", "name", "type", "capabilities", "runtimeConfig", "args", "dns"}

// TestConflistKeys checks that every rdma-chain entry a page writes (in a
// conflist, as an entry of "type":"rdma-chain", or as keys for `--set`)
// uses only keys the configuration table of configuration.md defines,
// nested ones included, and the plugin's own parser accepts it; so does
// every `key: value` code span whose key is one of the table's.
func TestConflistKeys(t *testing.T) {
	table := configTable(t)
	checked := 0
	for _, p := range pages(t) {
		problems, n := conflistProblems(p, table)
		checked += n
		for _, msg := range problems {
			t.Error(msg)
		}
	}
	t.Logf("%d entries and key: value spans checked", checked)
	if checked < 20 {
		t.Errorf("only %d entries found: the pages' parsing is broken", checked)
	}
}

// conflistProblems says which entries and key: value spans of p use a key
// the table lacks or a value the plugin refuses, and how many it checked.
func conflistProblems(p page, table map[string]bool) ([]string, int) {
	var out []string
	n := 0
	for _, text := range append(append([]string{}, p.spans...), p.blocks...) {
		for _, entry := range entries(text, table) {
			n++
			out = append(out, entryKeyProblems(p.name, entry, table)...)
			out = append(out, entryParseProblems(p.name, entry)...)
		}
	}
	for _, span := range p.spans {
		if entry, ok := keyValueSpan(span, table); ok {
			n++
			out = append(out, entryParseProblems(p.name, entry)...)
		}
	}
	return out, n
}

// configTable reads the keys of configuration.md's table (the first table
// under "## Configuration"): each top-level key, and for an object's key
// ("sharedLink", "smcr") the "name": keys its row's first code span holds,
// as "sharedLink.type".
func configTable(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Configuration\n")
	if !ok {
		t.Fatal("configuration.md has no Configuration section")
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z][A-Za-z0-9]*)` \\|(.*)\\|$")
	nested := regexp.MustCompile(`"([A-Za-z][A-Za-z0-9]*)":`)
	keys := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(strings.SplitN(section, "\n\n", 3)[1], -1) {
		keys[m[1]] = true
		first := codeSpan.FindStringSubmatch(m[2])
		if first == nil || !strings.HasPrefix(first[1], "{") {
			continue
		}
		for _, n := range nested.FindAllStringSubmatch(first[1], -1) {
			keys[m[1]+"."+n[1]] = true
		}
	}
	for _, want := range []string{"mode", "sharedLink", "sharedLink.type", "smcr.transparent"} {
		if !keys[want] {
			t.Fatalf("read no key %s from configuration.md's table: %v", want, keys)
		}
	}
	return keys
}

// entries are the rdma-chain entries among the JSON objects of text.
func entries(text string, table map[string]bool) []map[string]json.RawMessage {
	var out []map[string]json.RawMessage
	for i := 0; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		var obj map[string]json.RawMessage
		if dec.Decode(&obj) != nil {
			continue
		}
		i += int(dec.InputOffset()) - 1
		out = append(out, entriesOf(obj, table)...)
	}
	return out
}

// entriesOf returns a conflist's rdma-chain entries, an rdma-chain entry,
// or keys for --set (no type, and a key of the table).
func entriesOf(obj map[string]json.RawMessage, table map[string]bool) []map[string]json.RawMessage {
	if raw, ok := obj["plugins"]; ok {
		var plugins []map[string]json.RawMessage
		if json.Unmarshal(raw, &plugins) != nil {
			return nil
		}
		var out []map[string]json.RawMessage
		for _, p := range plugins {
			out = append(out, entriesOf(p, table)...)
		}
		return out
	}
	if raw, ok := obj["type"]; ok {
		if bytes.Equal(raw, []byte(`"rdma-chain"`)) {
			return []map[string]json.RawMessage{obj}
		}
		return nil
	}
	for k := range obj {
		if table[k] && k != "ipam" {
			return []map[string]json.RawMessage{obj}
		}
	}
	return nil
}

// entryKeyProblems lists the entry's keys, and those of its objects the
// table details, that are neither the table's nor the CNI
// specification's.
func entryKeyProblems(page string, entry map[string]json.RawMessage, table map[string]bool) []string {
	var out []string
	for k, raw := range entry {
		if !table[k] && !slices.Contains(cniKeys, k) {
			out = append(out, fmt.Sprintf("%s writes the key %q, which configuration.md's table does not define: %s", page, k, show(entry)))
			continue
		}
		var nested map[string]json.RawMessage
		if !hasNested(table, k) || json.Unmarshal(raw, &nested) != nil {
			continue
		}
		for n := range nested {
			if !table[k+"."+n] {
				out = append(out, fmt.Sprintf("%s writes the key %s.%s, which configuration.md's table does not define: %s", page, k, n, show(entry)))
			}
		}
	}
	return out
}

func hasNested(table map[string]bool, key string) bool {
	for k := range table {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// entryParseProblems reports what the plugin's parser refuses of the
// entry (with the keys every conflist gives it).
func entryParseProblems(page string, entry map[string]json.RawMessage) []string {
	conf := map[string]json.RawMessage{"cniVersion": json.RawMessage(`"1.0.0"`), "name": json.RawMessage(`"docs"`), "type": json.RawMessage(`"rdma-chain"`)}
	for k, v := range entry {
		conf[k] = v
	}
	data, err := json.Marshal(conf)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", page, err)}
	}
	if _, _, err := config.ParseWithoutPrevResult(data); err != nil {
		return []string{fmt.Sprintf("%s writes %s, which the plugin refuses: %v", page, show(entry), err)}
	}
	return nil
}

// keyValueSpan reads a code span `key: value` or `"key":value` whose key
// (or its first part, smcr.transparent) is one of the table's as an entry
// holding that key; a value that is not JSON is a string.
func keyValueSpan(span string, table map[string]bool) (map[string]json.RawMessage, bool) {
	m := regexp.MustCompile(`^"?([A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)?)"?\s*:\s*(\S.*)$`).FindStringSubmatch(span)
	if m == nil {
		return nil, false
	}
	top, sub, nested := strings.Cut(m[1], ".")
	if !table[top] || nested && !table[m[1]] {
		return nil, false
	}
	value := json.RawMessage(m[2])
	if !json.Valid(value) {
		value, _ = json.Marshal(m[2])
	}
	if nested {
		value, _ = json.Marshal(map[string]json.RawMessage{sub: value})
	}
	return map[string]json.RawMessage{top: value}, true
}

func show(entry map[string]json.RawMessage) string {
	data, _ := json.Marshal(entry)
	return string(data)
}
