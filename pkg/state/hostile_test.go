package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHostileLayouts plants links and wrong file types at the store's own
// paths and checks that every operation refuses them with ErrUnsafePath and
// that nothing is created or changed through a link.
func TestHostileLayouts(t *testing.T) {
	for _, tt := range hostileLayouts {
		t.Run(tt.name, func(t *testing.T) {
			root, target := t.TempDir(), t.TempDir()
			tt.plant(t, root, target)
			before := snapshot(t, target)
			s := New(filepath.Join(root, "state"))
			for _, op := range tt.ops {
				if err := runOp(s, op); !errors.Is(err, ErrUnsafePath) {
					t.Errorf("%s = %v, want ErrUnsafePath", op, err)
				}
			}
			if after := snapshot(t, target); after != before {
				t.Errorf("link target changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// hostileLayouts plant a layout under root (the state dir is root/state),
// with links pointing into target, which must stay as it is; ops must then
// fail with ErrUnsafePath.
var hostileLayouts = []struct {
	name  string
	plant func(t *testing.T, root, target string)
	ops   []string
}{
	{"state dir is a link to a directory", func(t *testing.T, root, target string) {
		symlink(t, target, filepath.Join(root, "state"))
	}, allOps},
	{"state dir is a dangling link", func(t *testing.T, root, target string) {
		symlink(t, filepath.Join(target, "missing"), filepath.Join(root, "state"))
	}, allOps},
	{"lock is a link to a missing file", func(t *testing.T, root, target string) {
		mkdir(t, filepath.Join(root, "state"))
		symlink(t, filepath.Join(target, "created"), filepath.Join(root, "state", "lock"))
	}, []string{"Lock", "Exists"}},
	{"lock is a link to a file", func(t *testing.T, root, target string) {
		writeFile(t, filepath.Join(target, "file"), "keep")
		mkdir(t, filepath.Join(root, "state"))
		symlink(t, filepath.Join(target, "file"), filepath.Join(root, "state", "lock"))
	}, []string{"Lock", "Exists"}},
	{"lock is a directory", func(t *testing.T, root, target string) {
		mkdir(t, filepath.Join(root, "state", "lock"))
	}, []string{"Lock", "Exists"}},
	{"attachments is a link to a directory", func(t *testing.T, root, target string) {
		writeFile(t, filepath.Join(target, fileName(fullRecord().Key())), "{}")
		mkdir(t, filepath.Join(root, "state"))
		symlink(t, target, filepath.Join(root, "state", "attachments"))
	}, recordOps},
	{"attachments is a dangling link", func(t *testing.T, root, target string) {
		mkdir(t, filepath.Join(root, "state"))
		symlink(t, filepath.Join(target, "missing"), filepath.Join(root, "state", "attachments"))
	}, recordOps},
	{"attachments is a file", func(t *testing.T, root, target string) {
		mkdir(t, filepath.Join(root, "state"))
		writeFile(t, filepath.Join(root, "state", "attachments"), "")
	}, recordOps},
	{"quarantine is a link to a directory", func(t *testing.T, root, target string) {
		mkdir(t, filepath.Join(root, "state", "attachments", fileName(badKey)))
		symlink(t, target, filepath.Join(root, "state", "quarantine"))
	}, []string{"Quarantine"}},
	{"state dir writable by everyone", func(t *testing.T, root, target string) {
		chmod(t, filepath.Join(root, "state"), 0o777)
	}, allOps},
	{"state dir writable by everyone, sticky", func(t *testing.T, root, target string) {
		chmod(t, filepath.Join(root, "state"), 0o777|os.ModeSticky)
	}, allOps},
	{"attachments writable by everyone", func(t *testing.T, root, target string) {
		chmod(t, filepath.Join(root, "state", "attachments"), 0o777)
	}, recordOps},
}

var (
	allOps    = []string{"Lock", "Put", "PutUnsynced", "Get", "Exists", "List", "Delete", "Writable", "Sweep", "Quarantine"}
	recordOps = []string{"Put", "PutUnsynced", "Get", "Exists", "List", "Delete", "Writable", "Sweep", "Quarantine"}
)

func runOp(s *Store, op string) error {
	switch op {
	case "Lock":
		unlock, err := s.Lock(100 * time.Millisecond)
		if err == nil {
			unlock()
		}
		return err
	case "Put":
		return s.Put(fullRecord())
	case "PutUnsynced":
		return s.PutUnsynced(fullRecord())
	case "Get":
		_, err := s.Get(badKey)
		return err
	case "Exists":
		_, err := s.Exists(fullRecord().Key())
		return err
	case "List":
		_, err := s.List()
		return err
	case "Delete":
		return s.Delete(fullRecord().Key())
	case "Writable":
		return s.Writable()
	case "Sweep":
		_, err := s.Sweep()
		return err
	case "Quarantine":
		_, err := s.Quarantine(s.path(badKey))
		return err
	}
	panic("unknown op " + op)
}

// chmod creates the directory path and sets its mode.
func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	mkdir(t, path)
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// snapshot describes every entry under dir: names, types, sizes.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var out string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out += fmt.Sprintf("%s %v %d\n", p, fi.Mode(), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForeignOwner refuses a state directory another user owns: that user
// could plant records or links in it.
func TestForeignOwner(t *testing.T) {
	dir := "/" // owned by root: foreign unless the test runs as root
	if os.Geteuid() == 0 {
		dir = filepath.Join(t.TempDir(), "state")
		mkdir(t, dir)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range allOps {
		if err := runOp(New(dir), op); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%s in a directory of another user = %v, want ErrUnsafePath", op, err)
		}
	}
}

// TestRecordLinkReplacedNotFollowed checks that Put over a link at the
// record path replaces the link, and Delete removes the link; its target
// is untouched.
func TestRecordLinkReplacedNotFollowed(t *testing.T) {
	for _, op := range []string{"Put", "Delete"} {
		t.Run(op, func(t *testing.T) {
			s := New(t.TempDir())
			if err := s.ensureAttachDir(); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "target")
			writeFile(t, target, "keep")
			path := s.path(fullRecord().Key())
			symlink(t, target, path)
			if err := runOp(s, op); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			if data, err := os.ReadFile(target); err != nil || string(data) != "keep" {
				t.Errorf("link target now %q, %v", data, err)
			}
			fi, err := os.Lstat(path)
			switch {
			case op == "Put" && (err != nil || !fi.Mode().IsRegular()):
				t.Errorf("record path after Put: %v, %v; want a regular file", fi, err)
			case op == "Delete" && !os.IsNotExist(err):
				t.Errorf("record path after Delete: %v, %v; want nothing", fi, err)
			}
		})
	}
}
