package smc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeReply feeds kernel reply bytes to every SMC reply decoder (pnet
// dump entries, UEID table, fallback statistics, SMC-R devices, the genl
// controller's family id), once as one message and, when split falls
// inside it, as a dump of two messages. No input may panic, and whatever
// decodes must keep the decoders' own rules. The seed corpus in
// testdata/fuzz/FuzzDecodeReply is the byte-for-byte messages of the unit
// tests (see fuzzSeeds and TestFuzzSeedCorpus).
func FuzzDecodeReply(f *testing.F) {
	f.Fuzz(func(t *testing.T, msg []byte, split uint16) {
		checkDecoders(t, [][]byte{msg})
		if s := int(split); s > 0 && s < len(msg) {
			checkDecoders(t, [][]byte{msg[:s], msg[s:]})
		}
	})
}

// checkDecoders runs every decoder over one dump and checks its results.
func checkDecoders(t *testing.T, msgs [][]byte) {
	if entries, err := decodePnetDump(msgs); err == nil {
		checkPnetEntries(t, entries, len(msgs))
	}
	if ueids, err := decodeUEIDs(msgs); err == nil {
		for _, u := range ueids {
			if strings.HasSuffix(u, " ") || strings.ContainsRune(u, 0) {
				t.Fatalf("UEID %q keeps padding or NUL", u)
			}
		}
	}
	if r, err := decodeFallback(msgs); err == nil && len(r.Reasons) > len(msgs) {
		t.Fatalf("%d fallback reasons from %d messages", len(r.Reasons), len(msgs))
	}
	if devs, err := decodeDevSMCR(msgs); err == nil {
		for _, d := range devs {
			if d.Port != 1 && d.Port != 2 {
				t.Fatalf("SMC-R device %+v: port not 1 or 2", d)
			}
		}
	}
	_, _ = decodeFamilyID(msgs)
}

// checkPnetEntries checks that there is one entry per message and that
// "n/a" and port 255 never leak.
func checkPnetEntries(t *testing.T, entries []PnetEntry, n int) {
	if len(entries) != n {
		t.Fatalf("%d pnet entries from %d messages", len(entries), n)
	}
	for _, e := range entries {
		_ = e.String()
		switch {
		case e.EthName == pnetNA || e.IBName == pnetNA:
			t.Fatalf("entry %+v keeps the kernel's n/a", e)
		case e.IBPort != 0 && (e.IBName == "" || e.IBPort == pnetPortNA):
			t.Fatalf("entry %+v has a port without an RDMA device", e)
		case strings.HasSuffix(e.PnetID, " "):
			t.Fatalf("entry %+v keeps PNETID padding", e)
		}
	}
}

// fuzzSeed is one corpus entry: a reply and where to split it into two.
type fuzzSeed struct {
	name  string
	msg   []byte
	split int
}

// fuzzSeeds are the unit tests' kernel messages.
func fuzzSeeds() []fuzzSeed {
	ib := kernelPnetMsg(PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 2})
	erdma, mlx := devSMCRMsgs()
	second := fallbackSecondMsg()
	return []fuzzSeed{
		{"pnet-eth", ethDumpMsg, 0},
		{"pnet-ib", ib, 0},
		{"pnet-two-entries", cat(ethDumpMsg, ib), len(ethDumpMsg)},
		{"ueid", genl(genCmdDumpUEID, nla(ueidAttrEntry, cstr("SMC-R.V2"+strings.Repeat(" ", 24)))), 0},
		{"fallback-server", fallbackFirstMsg, 0},
		{"fallback-two-reasons", cat(fallbackFirstMsg, second), len(fallbackFirstMsg)},
		{"smcr-dev-erdma", erdma, 0},
		{"smcr-dev-two-ports", mlx, 0},
		{"family-id", familyReply(0x1d)[0], 0},
	}
}

func cat(a, b []byte) []byte { return append(append([]byte{}, a...), b...) }

// corpusFile renders a seed in the go test fuzz v1 format.
func corpusFile(s fuzzSeed) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nuint16(%d)\n", s.msg, s.split)
}

// TestFuzzSeedCorpus checks that the checked-in corpus is the unit tests'
// messages, and that the decoders keep their rules on them.
// UPDATE_FUZZ_CORPUS=1 rewrites the corpus from fuzzSeeds.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeReply")
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
		checkDecoders(t, [][]byte{s.msg})
	}
}
