package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRepoRoot(t *testing.T) {
	root := RepoRoot()
	for _, f := range []string{"go.mod", "Makefile", "internal/testonly/testenv/testenv.go"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("RepoRoot %s: %v", root, err)
		}
	}
}

func TestModuleRootAbove(t *testing.T) {
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(other, "a", "b")
	if err := os.MkdirAll(nested, 0o700); err != nil {
		t.Fatal(err)
	}
	ours := t.TempDir()
	if err := os.WriteFile(filepath.Join(ours, "go.mod"), []byte("// c\n"+module+"\n\ngo 1.26.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(ours, "deploy")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	// A module of its own below ours (deploy/, internal/mkimage/) is passed.
	if err := os.WriteFile(filepath.Join(inner, "go.mod"), []byte("module github.com/rdma-chain/rdma-chain/deploy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, start, want string
	}{
		{"top folder", ours, ours},
		{"module below ours", inner, ours},
		{"another module only", nested, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := moduleRootAbove(tc.start)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "no folder") {
					t.Fatalf("moduleRootAbove(%s) = %q, %v; want an error", tc.start, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("moduleRootAbove(%s) = %q, %v; want %q", tc.start, got, err, tc.want)
			}
		})
	}
}

// deadlined is a test whose binary ends at end (ok false: no -timeout).
type deadlined struct {
	testing.TB
	end time.Time
	ok  bool
}

func (d deadlined) Deadline() (time.Time, bool) { return d.end, d.ok }

func TestWithin(t *testing.T) {
	const timeout = 10 * time.Minute
	now := time.Now()
	for _, tc := range []struct {
		name     string
		tb       testing.TB
		min, max time.Duration
		cut      bool
	}{
		{"no deadline method", struct{ testing.TB }{t}, timeout, timeout, false},
		{"no -timeout", deadlined{t, time.Time{}, false}, timeout, timeout, false},
		{"deadline far off", deadlined{t, now.Add(time.Hour), true}, timeout, timeout, false},
		{"deadline first", deadlined{t, now.Add(5 * time.Minute), true}, 2*time.Minute + 50*time.Second, 3 * time.Minute, true},
		{"deadline inside the margin", deadlined{t, now.Add(time.Minute), true}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, why := Within(tc.tb, timeout)
			if wait < tc.min || wait > tc.max || (why != "") != tc.cut {
				t.Fatalf("Within = %v, %q; want %v..%v, cut short %v", wait, why, tc.min, tc.max, tc.cut)
			}
		})
	}
}
