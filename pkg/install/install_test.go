package install

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// TestEnsureEntryKeepsAgentWrite: the primary's agent writes a new version
// of its conflist between EnsureEntry's read and its rename (once, or at
// every attempt); the agent's version is never replaced by an edit of the
// older one: the entry goes into the newest version, or nothing is written
// and the error says the file kept changing.
func TestEnsureEntryKeepsAgentWrite(t *testing.T) {
	version := func(gen string) string {
		return `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico","gen":"` + gen + `"}]}`
	}
	for _, tc := range []struct {
		name    string
		writes  int // agent writes, one per attempt
		wantGen string
		wantErr error
	}{
		{"one write", 1, "1", nil},
		{"a write at every attempt", editAttempts, strconv.Itoa(editAttempts), conflist.ErrChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "10-calico.conflist")
			if err := os.WriteFile(path, []byte(version("0")), 0o644); err != nil {
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
				if err := os.WriteFile(tmp, []byte(version(strconv.Itoa(writes))), 0o644); err != nil {
					t.Error(err)
				}
				if err := os.Rename(tmp, p); err != nil {
					t.Error(err)
				}
			}
			defer func() { beforeReplace = nil }()
			restored, err := EnsureEntry(path, "calico", []byte(`{"mode":"shared"}`))
			data, _ := os.ReadFile(path)
			if !strings.Contains(string(data), `"gen":"`+tc.wantGen+`"`) {
				t.Fatalf("the agent's write %s was lost:\n%s", tc.wantGen, data)
			}
			if tc.wantErr != nil {
				if restored || !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), "attempts") {
					t.Errorf("EnsureEntry = %v, %v; want %v", restored, err, tc.wantErr)
				}
				return
			}
			if !restored || err != nil || !strings.Contains(string(data), `"type": "rdma-chain"`) {
				t.Errorf("EnsureEntry = %v, %v:\n%s", restored, err, data)
			}
		})
	}
}
