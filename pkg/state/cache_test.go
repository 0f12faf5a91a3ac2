package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCache(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	if _, ok := s.ReadCache("cache-x", time.Minute); ok {
		t.Fatal("a missing cache read as fresh")
	}
	if err := s.WriteCache("cache-x", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if b, ok := s.ReadCache("cache-x", time.Minute); !ok || string(b) != "v1" {
		t.Fatalf("fresh cache: %q %v", b, ok)
	}
	path := filepath.Join(dir, "cache-x")
	for _, c := range []struct {
		name  string
		mtime time.Time
	}{{"old", time.Now().Add(-2 * time.Minute)}, {"in the future", time.Now().Add(time.Hour)}} {
		if err := os.Chtimes(path, c.mtime, c.mtime); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.ReadCache("cache-x", time.Minute); ok {
			t.Errorf("%s cache read as fresh", c.name)
		}
	}
	// A symbolic link is neither followed on read nor written through.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "cache-link")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.ReadCache("cache-link", time.Hour); ok {
		t.Error("read through a symbolic link")
	}
	if err := s.WriteCache("cache-link", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "outside" {
		t.Errorf("wrote through a symbolic link: %q", b)
	}
	for _, bad := range []string{"../cache-x", "attachments", "cache-a/b", ""} {
		if err := s.WriteCache(bad, []byte("x")); err == nil {
			t.Errorf("WriteCache(%q) accepted", bad)
		}
	}
}
