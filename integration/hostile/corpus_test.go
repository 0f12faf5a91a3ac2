package hostile

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Case is one file of the corpus. Strings may hold the placeholders @DIR
// (the case's own folder), @OUT (a folder outside it that stands for the rest
// of the host), @PODNS (a pod netns path: a real one on the privileged tier,
// a missing path otherwise), @NODENS (the netns the plugin runs in, by a path
// of its own; privileged cases only) and @SELFNS (/proc/self/ns/net).
type Case struct {
	Doc        string `json:"doc"`
	Privileged bool   `json:"privileged"`
	// Env overrides the default environment; a null value unsets the variable.
	Env map[string]json.RawMessage `json:"env"`
	// Conf is merged over the base conf; a null value deletes the key.
	Conf map[string]json.RawMessage `json:"conf"`
	// Stdin, when set, replaces the conf entirely (a string after expansion);
	// StdinBase64 likewise, for bytes that are not text.
	Stdin       json.RawMessage `json:"stdin"`
	StdinBase64 string          `json:"stdinBase64"`
	Setup       Setup           `json:"setup"`
	Expect      Expect          `json:"expect"`
}

// Setup prepares the case's folders before the run.
type Setup struct {
	Dirs     []string          `json:"dirs"`
	Files    map[string]string `json:"files"`
	Symlinks map[string]string `json:"symlinks"` // link path -> target
	// Record plants the call's own state record: valid, truncated, empty,
	// binary, array, null, version (unknown version), dir (a directory at the
	// record path), wrongkey (another attachment's record), wrongtypes.
	Record string `json:"record"`
	// RecordPatch sets keys of a valid record (placeholders replaced): a
	// readable record that lies, e.g. names the node's own netns.
	RecordPatch map[string]json.RawMessage `json:"recordPatch"`
}

// Expect is the exact outcome.
type Expect struct {
	Code        uint     `json:"code"`        // a CNI error object with this code
	OK          bool     `json:"ok"`          // success
	PassThrough bool     `json:"passThrough"` // success printing the prevResult
	Quarantined int      `json:"quarantined"` // entries under <dataDir>/quarantine afterwards
	RecordGone  bool     `json:"recordGone"`  // the call's record path is gone afterwards
	Absent      []string `json:"absent"`      // paths that must not exist afterwards
}

// loadCorpus reads every case file.
func loadCorpus(t *testing.T) map[string]*Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus under testdata/cases: %v", err)
	}
	out := map[string]*Case{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &Case{}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if (c.Expect.Code != 0) == (c.Expect.OK || c.Expect.PassThrough) {
			t.Fatalf("%s: expect exactly one of code or ok/passThrough", f)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = c
	}
	return out
}

func sortedNames(m map[string]*Case) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// expand replaces the generators {"@repeat":X,"n":N} (an array of N copies of
// X) and {"@string":S,"n":N} (S repeated N times) inside a value decoded
// with UseNumber.
func expand(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if n, ok := count(x); ok {
			if elem, ok := x["@repeat"]; ok {
				arr := make([]any, n)
				for i := range arr {
					arr[i] = expand(elem)
				}
				return arr
			}
			if s, ok := x["@string"].(string); ok {
				return strings.Repeat(s, n)
			}
		}
		for k, e := range x {
			x[k] = expand(e)
		}
	case []any:
		for i, e := range x {
			x[i] = expand(e)
		}
	}
	return v
}

// decodeExpand decodes raw (with placeholders replaced) and expands it.
func decodeExpand(raw json.RawMessage, repl *strings.Replacer) (any, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(repl.Replace(string(raw))))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return expand(v), nil
}

// count is a generator's N: it has exactly two keys, one of them "n".
func count(x map[string]any) (int, bool) {
	num, ok := x["n"].(json.Number)
	if !ok || len(x) != 2 {
		return 0, false
	}
	n, err := num.Int64()
	return int(n), err == nil
}

// stdin builds the bytes the plugin reads.
func (c *Case) stdin(base map[string]any, repl *strings.Replacer) ([]byte, error) {
	if c.StdinBase64 != "" {
		return base64.StdEncoding.DecodeString(c.StdinBase64)
	}
	if len(c.Stdin) > 0 {
		v, err := decodeExpand(c.Stdin, repl)
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("stdin must expand to a string, got %T", v)
		}
		return []byte(s), nil
	}
	conf := map[string]any{}
	for k, v := range base {
		conf[k] = v
	}
	for k, raw := range c.Conf {
		v, err := decodeExpand(raw, repl)
		if err != nil {
			return nil, fmt.Errorf("conf %s: %w", k, err)
		}
		if v == nil {
			delete(conf, k)
			continue
		}
		conf[k] = v
	}
	return json.Marshal(conf)
}

// environ builds the plugin's environment over the defaults.
func (c *Case) environ(defaults map[string]string, repl *strings.Replacer) ([]string, error) {
	env := map[string]string{}
	for k, v := range defaults {
		env[k] = repl.Replace(v)
	}
	for k, raw := range c.Env {
		v, err := decodeExpand(raw, repl)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		switch s := v.(type) {
		case nil:
			delete(env, k)
		case string:
			env[k] = s
		default:
			return nil, fmt.Errorf("env %s must be a string or null", k)
		}
	}
	out := []string{}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}
