package install

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// TestEditsKeepAgentWrite has the primary's agent write a new version of
// its conflist between an edit's read and its rename (once, or at every
// attempt), for each edit of the conflist (the entry put back, the drain
// set, the entry removed), and checks that the agent's version is never
// replaced by an edit of the older one: the edit goes into the newest
// version, or nothing is written and the error says the file kept
// changing.
func TestEditsKeepAgentWrite(t *testing.T) {
	const entry = `{"type":"rdma-chain","mode":"shared"}`
	version := func(gen int, withEntry bool) string {
		plugins := `{"type":"calico","gen":"` + strconv.Itoa(gen) + `"}`
		if withEntry {
			plugins += "," + entry
		}
		return `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[` + plugins + `]}`
	}
	edits := []struct {
		name      string
		withEntry bool // the agent's versions have the entry
		edit      func(path string) error
		edited    string // in the result
	}{
		{"entry put back", false, func(p string) error {
			restored, err := EnsureEntry(p, "calico", []byte(`{"mode":"shared"}`))
			if err == nil && !restored {
				err = errors.New("not restored")
			}
			return err
		}, `"type": "rdma-chain"`},
		{"drain set", true, func(p string) error { return setDrain(p, io.Discard) }, `"drain": true`},
		{"entry removed", true, func(p string) error { return removeEntry(p, io.Discard) }, `"gen":"WANT"}]}`},
	}
	for _, e := range edits {
		for _, tc := range []struct {
			name    string
			writes  int // agent writes, one per attempt
			wantErr error
		}{
			{"one write", 1, nil},
			{"a write at every attempt", editAttempts, conflist.ErrChanged},
		} {
			t.Run(e.name+"/"+tc.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "10-calico.conflist")
				if err := os.WriteFile(path, []byte(version(0, e.withEntry)), 0o644); err != nil {
					t.Fatal(err)
				}
				writes := 0
				beforeReplace = func(p string) {
					if writes == tc.writes {
						return
					}
					writes++
					// As agents do: a new file renamed over the old one.
					tmp := p + ".agent"
					if err := os.WriteFile(tmp, []byte(version(writes, e.withEntry)), 0o644); err != nil {
						t.Error(err)
					}
					if err := os.Rename(tmp, p); err != nil {
						t.Error(err)
					}
				}
				defer func() { beforeReplace = nil }()
				err := e.edit(path)
				data, _ := os.ReadFile(path)
				want := strconv.Itoa(tc.writes)
				if !strings.Contains(string(data), `"gen":"`+want+`"`) {
					t.Fatalf("the agent's version %s was lost:\n%s", want, data)
				}
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), "attempts") {
						t.Errorf("edit: %v; want %v", err, tc.wantErr)
					}
					return
				}
				if err != nil || !strings.Contains(string(data), strings.ReplaceAll(e.edited, "WANT", want)) {
					t.Errorf("edit: %v:\n%s", err, data)
				}
			})
		}
	}
}
