package state

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestSweep(t *testing.T) {
	old := time.Now().Add(-2 * probeMaxAge)
	tests := []struct {
		name        string
		files       map[string]time.Time // name in attachments/ -> mtime (zero: now)
		wantRemoved int
		wantLeft    []string
	}{
		{"nothing", nil, 0, nil},
		{"temp files of killed writers", map[string]time.Time{".tmp-1": {}, ".tmp-2": old}, 2, nil},
		{"young probe kept, old probe removed", map[string]time.Time{".probe-young": {}, ".probe-old": old}, 1, []string{".probe-young"}},
		{"other files kept", map[string]time.Time{"notes.txt": old, ".hidden": old, "x.json": old, ".tmp-x": {}}, 1,
			[]string{".hidden", "notes.txt", "x.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t.TempDir())
			if err := s.ensureAttachDir(); err != nil {
				t.Fatal(err)
			}
			for name, mtime := range tt.files {
				p := filepath.Join(s.attachDir(), name)
				writeFile(t, p, "x")
				if !mtime.IsZero() {
					if err := os.Chtimes(p, mtime, mtime); err != nil {
						t.Fatal(err)
					}
				}
			}
			removed, err := s.Sweep()
			if err != nil || removed != tt.wantRemoved {
				t.Errorf("Sweep = %d, %v; want %d", removed, err, tt.wantRemoved)
			}
			if left := names(t, s.attachDir()); strings.Join(left, ",") != strings.Join(tt.wantLeft, ",") {
				t.Errorf("left %v, want %v", left, tt.wantLeft)
			}
		})
	}
}

func TestSweepRemovesLinksNotTargets(t *testing.T) {
	s := New(t.TempDir())
	if err := s.ensureAttachDir(); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "precious")
	writeFile(t, target, "keep")
	symlink(t, target, filepath.Join(s.attachDir(), ".tmp-link"))
	if n, err := s.Sweep(); n != 1 || err != nil {
		t.Errorf("Sweep = %d, %v; want 1", n, err)
	}
	if data, err := os.ReadFile(target); err != nil || string(data) != "keep" {
		t.Errorf("link target now %q, %v", data, err)
	}
}

func TestSweepMissingDir(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "none"))
	if n, err := s.Sweep(); n != 0 || err != nil {
		t.Errorf("Sweep = %d, %v; want 0, nil", n, err)
	}
	if _, err := os.Lstat(s.dir); !os.IsNotExist(err) {
		t.Errorf("Sweep created the state directory: %v", err)
	}
}

// TestWritableLeavesNothing also shows that a concurrent Sweep (which runs
// under the lock while Writable does not) is told apart by the probe name.
func TestWritableLeavesNothing(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	for range 3 {
		if err := s.Writable(); err != nil {
			t.Fatal(err)
		}
	}
	if left := names(t, s.attachDir()); len(left) != 0 {
		t.Errorf("Writable left %v", left)
	}
	if got := probePrefix; strings.HasPrefix(got, tmpPrefix) || strings.HasPrefix(tmpPrefix, got) {
		t.Errorf("probe prefix %q overlaps temp prefix %q", probePrefix, tmpPrefix)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}
