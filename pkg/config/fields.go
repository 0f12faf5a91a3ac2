package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Bounds on lists a caller may send.
const (
	maxConfList    = 1024
	maxAttachments = 65536
	maxWarnings    = 32
)

// fieldError names the field that failed; asCNI turns it into a CNI error.
type fieldError struct {
	field, reason string
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %q: %s", e.field, e.reason) }

func errField(field, format string, args ...any) error {
	return &fieldError{field: field, reason: fmt.Sprintf(format, args...)}
}

// asCNI turns err into a CNI error with code; a *types.Error is kept.
func asCNI(code uint, err error) error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	msg := "invalid network configuration"
	if code == types.ErrDecodingFailure {
		msg = "invalid prevResult"
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return types.NewError(code, fmt.Sprintf("%s: field %q", msg, fe.field), fe.reason)
	}
	return types.NewError(code, msg, err.Error())
}

// warnings collects what Parse ignored, bounded so that a hostile input
// cannot flood the log.
type warnings struct {
	msgs    []string
	dropped int
}

func (w *warnings) add(format string, args ...any) {
	if len(w.msgs) >= maxWarnings {
		w.dropped++
		return
	}
	w.msgs = append(w.msgs, fmt.Sprintf(format, args...))
}

func (w *warnings) list() []string {
	out := w.msgs
	if w.dropped > 0 {
		out = append(out, fmt.Sprintf("%d more ignored keys not listed", w.dropped))
	}
	return out
}

// decodeFn decodes the value of the field at path.
type decodeFn func(path string, raw json.RawMessage, w *warnings) error

// field is one known key and its decoder.
type field struct {
	key    string
	decode decodeFn
}

// decodeObject decodes one JSON object keeping every key as written; a Go
// struct would match keys case-insensitively, a map does not.
func decodeObject(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	err := json.Unmarshal(raw, &m)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) || (err == nil && m == nil) {
		return nil, fmt.Errorf("want a JSON object, got %s", jsonKind(raw))
	}
	if err != nil {
		return nil, errors.New(jsonReason(err))
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool {
	return strings.TrimSpace(string(raw)) == "null"
}

// decodeFields decodes the known keys of obj in the order of fields and warns
// about every other key. It returns the known keys with their raw values.
func decodeFields(prefix string, obj map[string]json.RawMessage, fields []field, w *warnings) (map[string]json.RawMessage, error) {
	known := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if raw, ok := obj[f.key]; ok {
			known[f.key] = raw
		}
	}
	warnUnknown(prefix, obj, fields, w)
	for _, f := range fields {
		raw, ok := known[f.key]
		if !ok {
			continue
		}
		if err := f.decode(join(prefix, f.key), raw, w); err != nil {
			return nil, err
		}
	}
	return known, nil
}

func warnUnknown(prefix string, obj map[string]json.RawMessage, fields []field, w *warnings) {
	var unknown []string
	for k := range obj {
		if !hasField(fields, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		hint := ""
		for _, f := range fields {
			if strings.EqualFold(f.key, k) {
				hint = fmt.Sprintf(" (keys are case-sensitive: %q is known)", join(prefix, f.key))
			}
		}
		w.add("unknown configuration key %q ignored%s", truncate(join(prefix, k)), hint)
	}
}

func hasField(fields []field, k string) bool {
	for _, f := range fields {
		if f.key == k {
			return true
		}
	}
	return false
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// plain decodes into dst with encoding/json; only for values without
// nested objects whose keys would match case-insensitively.
func plain(dst any) decodeFn {
	return func(path string, raw json.RawMessage, _ *warnings) error {
		if err := json.Unmarshal(raw, dst); err != nil {
			return errField(path, "%s", jsonReason(err))
		}
		return nil
	}
}

// object decodes a nested object key by key; null leaves the defaults.
func object(fields func() []field) decodeFn {
	return func(path string, raw json.RawMessage, w *warnings) error {
		if isNull(raw) {
			return nil
		}
		obj, err := decodeObject(raw)
		if err != nil {
			return errField(path, "%v", err)
		}
		_, err = decodeFields(path, obj, fields(), w)
		return err
	}
}

// list decodes a JSON array of at most maxLen elements; null is empty.
func list(path string, raw json.RawMessage, maxLen int) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errField(path, "want a JSON array, got %s", jsonKind(raw))
	}
	if len(items) > maxLen {
		return nil, errField(path, "%d entries, at most %d allowed", len(items), maxLen)
	}
	return items, nil
}

// stringList decodes a bounded list of strings.
func stringList(dst *[]string, maxLen int) decodeFn {
	return func(path string, raw json.RawMessage, _ *warnings) error {
		items, err := list(path, raw, maxLen)
		if err != nil || items == nil {
			return err
		}
		out := make([]string, len(items))
		for i, item := range items {
			if err := json.Unmarshal(item, &out[i]); err != nil || isNull(item) {
				return errField(fmt.Sprintf("%s[%d]", path, i), "want a string, got %s", jsonKind(item))
			}
		}
		*dst = out
		return nil
	}
}

// jsonReason renders a decoding error without the package's prefix.
func jsonReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names the JSON type of raw for messages.
func jsonKind(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "":
		return "nothing"
	case s == "null":
		return "null"
	case s[0] == '{':
		return "an object"
	case s[0] == '[':
		return "an array"
	case s[0] == '"':
		return "a string"
	case s == "true" || s == "false":
		return "a boolean"
	}
	return "a number"
}
