package state

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestQuarantineKeepsNewest(t *testing.T) {
	s := New(t.TempDir())
	if err := s.ensureAttachDir(); err != nil {
		t.Fatal(err)
	}
	const n = MaxQuarantined + 8
	var moved []string
	for i := range n {
		p := filepath.Join(s.attachDir(), "r"+strconv.Itoa(i)+recordSuffix)
		if i%5 == 0 {
			mkdir(t, filepath.Join(p, "sub")) // directories are moved and pruned too
		} else {
			writeFile(t, p, "garbage")
		}
		dst, err := s.Quarantine(p)
		if err != nil {
			t.Fatalf("Quarantine #%d: %v", i, err)
		}
		if !strings.HasPrefix(filepath.Base(dst), filepath.Base(p)+".") || filepath.Dir(dst) != filepath.Join(s.dir, quarDirName) {
			t.Errorf("quarantined to %s", dst)
		}
		moved = append(moved, filepath.Base(dst))
	}
	left := names(t, filepath.Join(s.dir, quarDirName))
	want := append([]string(nil), moved[n-MaxQuarantined:]...)
	if strings.Join(left, ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
		t.Errorf("quarantine holds %v,\nwant the newest %d: %v", left, MaxQuarantined, want)
	}
	if fi, err := os.Lstat(filepath.Join(s.dir, quarDirName)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("quarantine dir %v, %v; want mode 0700", fi, err)
	}
	if left := names(t, s.attachDir()); len(left) != 0 {
		t.Errorf("attachments still holds %v", left)
	}
}

func TestQuarantineRefusesOtherPaths(t *testing.T) {
	s := New(t.TempDir())
	if err := s.Put(fullRecord()); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "x.json")
	writeFile(t, outside, "x")
	writeFile(t, filepath.Join(s.attachDir(), ".tmp-1.json"), "x")
	tests := []string{
		outside,
		filepath.Join(s.dir, lockFileName),
		filepath.Join(s.dir, "x.json"),
		s.attachDir(),
		filepath.Join(s.attachDir(), ".tmp-1.json"),
		filepath.Join(s.attachDir(), "..", "x.json"),
		filepath.Join(s.attachDir(), "sub", "x.json"),
		fileName(fullRecord().Key()), // relative
		"",
	}
	for _, p := range tests {
		if dst, err := s.Quarantine(p); err == nil {
			t.Errorf("Quarantine(%q) moved it to %s", p, dst)
		}
	}
	if _, err := os.Lstat(outside); err != nil {
		t.Errorf("outside file: %v", err)
	}
	if _, err := s.Quarantine(filepath.Join(s.attachDir(), "absent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Quarantine of an absent file = %v, want ErrNotExist", err)
	}
	if _, err := s.Get(fullRecord().Key()); err != nil {
		t.Errorf("good record gone: %v", err)
	}
}
