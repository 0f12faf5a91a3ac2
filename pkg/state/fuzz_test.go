package state

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder that Get and
// List use. It must never panic, and must either return a valid record that
// survives another encode/decode round or a *CorruptError naming the file.
// The seed corpus in testdata/fuzz/FuzzDecodeRecord holds the hostile kinds
// of TestCorruptRecords and valid records.
func FuzzDecodeRecord(f *testing.F) {
	r := fullRecord()
	r.Version = Version
	full, err := json.Marshal(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	const path = "/state/attachments/x.json"
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(path, data)
		if err != nil {
			var ce *CorruptError
			if r != nil || !errors.As(err, &ce) || ce.Path != path || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode = %v, %v; want nil and a *CorruptError for %s", r, err, path)
			}
			return
		}
		if r.Version < 1 || r.Version > Version || checkKey(r.Key()) != nil {
			t.Fatalf("decode accepted an invalid record: %+v", r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := decodeRecord(path, again)
		if err != nil || r2.Key() != r.Key() {
			t.Fatalf("re-decode = %+v, %v; want key %+v", r2, err, r.Key())
		}
	})
}
