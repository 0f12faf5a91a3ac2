package rdmares

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseReply feeds reply bytes to ParseReply for each kind. No input
// may panic, and what parses must keep the parser's rules: one entry of
// the asked kind per table entry, the device's name, a pid or a kernel
// owner (never both), an MR length only on MRs. The seed corpus in
// testdata/fuzz/FuzzParseReply is the unit tests' messages (fuzzSeeds,
// TestFuzzSeedCorpus).
func FuzzParseReply(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind uint8, msg []byte) {
		checkParse(t, Kinds[int(kind)%len(Kinds)], msg)
	})
}

func checkParse(t *testing.T, k Kind, msg []byte) {
	entries, err := ParseReply(k, 3, msg)
	if err != nil {
		return
	}
	for _, e := range entries {
		switch {
		case e.Kind != k:
			t.Fatalf("a %s reply gave a %s entry", k, e.Kind)
		case e.PID != 0 && e.KernName != "":
			t.Fatalf("entry %+v has a pid and a kernel owner", e)
		case e.Kind != MR && e.MRBytes != 0:
			t.Fatalf("entry %+v: MR bytes on a %s", e, e.Kind)
		case bytes.IndexByte([]byte(e.Device+e.KernName), 0) >= 0:
			t.Fatalf("entry %+v keeps a NUL", e)
		}
	}
}

type fuzzSeed struct {
	name string
	kind uint8 // index in Kinds
	msg  []byte
}

func fuzzSeeds() []fuzzSeed {
	return []fuzzSeed{
		{"qp-user-kernel", 0, reply(attrResQP, userQP, kernQP)},
		{"cq-empty", 1, reply(attrResCQ)},
		{"mr", 2, reply(attrResMR, userMR)},
		{"pd-task-gone", 3, reply(attrResPD, gonePD)},
	}
}

func corpusFile(s fuzzSeed) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\nuint8(%d)\n[]byte(%q)\n", s.kind, s.msg)
}

// TestFuzzSeedCorpus checks that the checked-in corpus is the unit tests'
// messages and that they parse. UPDATE_FUZZ_CORPUS=1 rewrites it.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseReply")
	for _, s := range fuzzSeeds() {
		path := filepath.Join(dir, s.name)
		if os.Getenv("UPDATE_FUZZ_CORPUS") == "1" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, corpusFile(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, corpusFile(s)) {
			t.Errorf("corpus %s differs from the test message (err %v); rerun with UPDATE_FUZZ_CORPUS=1", path, err)
		}
		if _, err := ParseReply(Kinds[s.kind], 3, s.msg); err != nil {
			t.Errorf("seed %s: %v", s.name, err)
		}
	}
}
