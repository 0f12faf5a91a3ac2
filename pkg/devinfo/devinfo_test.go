package devinfo

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

var ours = Content("0000:3b:00.0", "mlx5_0")

// TestContent checks that the content is the spec's v1.1.0 "pci"
// record.
func TestContent(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(ours, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "pci", "version": "1.1.0",
		"pci": map[string]any{"pci-address": "0000:3b:00.0", "rdma-device": "mlx5_0"}}
	b, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(b) != string(w) {
		t.Errorf("content %s, want %s", b, w)
	}
}

// TestWrite checks that Write creates the file (and its folder)
// atomically and never replaces what is there, a dangling link included;
// a temporary file a killed call left is replaced.
func TestWrite(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr error
		want    []byte // the file's content after Write
	}{
		{"new", func(*testing.T, string) {}, nil, ours},
		{"missing folders", func(t *testing.T, path string) { _ = os.RemoveAll(filepath.Dir(path)) }, nil, ours},
		{"foreign file", func(t *testing.T, path string) { write(t, path, "dp") }, ErrExists, []byte("dp")},
		{"same content, not ours to replace", func(t *testing.T, path string) { write(t, path, string(ours)) }, ErrExists, ours},
		{"dangling link", func(t *testing.T, path string) { link(t, filepath.Join(t.TempDir(), "x"), path) }, ErrExists, nil},
		{"temporary file left", func(t *testing.T, path string) { write(t, tempPath(path), string(ours[:10])) }, nil, ours},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cni", "net1-ctr-eth0-device-info.json")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, path)
			_, err := Write(path, ours)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Write = %v, want %v", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(path); string(got) != string(tc.want) {
				t.Errorf("file holds %q, want %q", got, tc.want)
			}
			if _, err := os.Lstat(tempPath(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary file left: %v", err)
			}
		})
	}
}

// TestRemove checks that Remove removes only a regular file holding
// exactly the plugin's content.
func TestRemove(t *testing.T) {
	cases := []struct {
		name     string
		prepare  func(t *testing.T, path string) string // returns a file that must survive
		wantGone bool
	}{
		{"ours", func(t *testing.T, path string) string { write(t, path, string(ours)); return "" }, true},
		{"missing", func(*testing.T, string) string { return "" }, true},
		{"foreign content", func(t *testing.T, path string) string { write(t, path, "dp"); return path }, false},
		{"link to ours", func(t *testing.T, path string) string {
			target := filepath.Join(t.TempDir(), "ours.json")
			write(t, target, string(ours))
			link(t, target, path)
			return target
		}, false},
		{"temporary file left", func(t *testing.T, path string) string { write(t, tempPath(path), string(ours[:5])); return "" }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev.json")
			keep := tc.prepare(t, path)
			if err := Remove(path, ours, nil); err != nil {
				t.Fatal(err)
			}
			_, err := os.Lstat(path)
			if gone := errors.Is(err, os.ErrNotExist); gone != tc.wantGone {
				t.Errorf("file gone = %v, want %v", gone, tc.wantGone)
			}
			if keep != "" {
				if _, err := os.Stat(keep); err != nil {
					t.Errorf("%s removed: %v", keep, err)
				}
			}
			if _, err := os.Lstat(tempPath(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary file left: %v", err)
			}
		})
	}
}

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"", "rel/x.json", "x.json", "/a/../b.json", "/..", "/", "/a//b", "/a/b/", "/a/./b",
		"/" + strings.Repeat("a/", 600) + "x.json", "/" + strings.Repeat("a", 256) + "/x.json", "/a\x00b"} {
		if CheckPath(p) == nil {
			t.Errorf("CheckPath(%q) accepted", p)
		}
	}
	if err := CheckPath("/var/run/k8s.cni.cncf.io/devinfo/cni/x.json"); err != nil {
		t.Error(err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// TestWriteFollowsNoUntrustedLink checks that Write follows no symbolic
// link in a parent folder that anyone but root could have placed (owned by
// another user, or in a folder others may write): a parent linked to
// another folder makes nothing there. A link root placed in a folder only
// root writes (systemd's /var/run -> /run) is followed.
func TestWriteFollowsNoUntrustedLink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prep   func(t *testing.T, parent, target string)
		follow bool
	}{
		{"link owned by another user", func(t *testing.T, parent, target string) {
			link(t, target, filepath.Join(parent, "run"))
			if err := os.Lchown(filepath.Join(parent, "run"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"root's link in a folder others may write", func(t *testing.T, parent, target string) {
			link(t, target, filepath.Join(parent, "run"))
			if err := os.Chmod(parent, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"root's link in a folder only root writes", func(t *testing.T, parent, target string) {
			link(t, target, filepath.Join(parent, "run"))
		}, true},
		{"relative root link", func(t *testing.T, parent, target string) {
			if err := os.Mkdir(filepath.Join(parent, "real"), 0o755); err != nil {
				t.Fatal(err)
			}
			link(t, "real/../real", filepath.Join(parent, "run"))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.RequireRoot(t) // owns links as root and as another user
			parent, target := t.TempDir(), t.TempDir()
			if err := os.Chmod(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.prep(t, parent, target)
			path := filepath.Join(parent, "run", "k8s.cni.cncf.io", "devinfo", "x.json")
			created, err := Write(path, ours)
			if !tc.follow {
				if !errors.Is(err, ErrUntrustedLink) {
					t.Fatalf("Write = %v, want %v", err, ErrUntrustedLink)
				}
				if entries, _ := os.ReadDir(target); len(entries) != 0 {
					t.Errorf("Write made %v behind the link", entries)
				}
				return
			}
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if got, _ := os.ReadFile(path); string(got) != string(ours) {
				t.Errorf("file holds %q", got)
			}
			if len(created) != 2 {
				t.Errorf("created %v, want the two missing folders", created)
			}
			if err := Remove(path, ours, created); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(parent, "run", "k8s.cni.cncf.io")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("created folders left: %v", err)
			}
		})
	}
}

// TestRemoveFolders checks that Remove removes the folders Write created
// when they are empty, and fails, changing nothing, when a folder of the
// path was replaced by a file.
func TestRemoveFolders(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "x.json")
	created, err := Write(path, ours)
	if err != nil || len(created) != 2 || created[0] != filepath.Join(base, "a") {
		t.Fatalf("Write = %v %v", created, err)
	}
	write(t, filepath.Join(base, "a", "other"), "x")
	if err := Remove(path, ours, created); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "a", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty folder b left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a", "other")); err != nil {
		t.Errorf("folder a with a foreign file removed: %v", err)
	}
	path2 := filepath.Join(base, "c", "x.json")
	created, err = Write(path2, ours)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(base, "c")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(base, "c"), "not a folder")
	if err := Remove(path2, ours, created); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("Remove with the folder replaced by a file = %v, want ENOTDIR", err)
	}
}

// TestMissingDirs checks that MissingDirs names the folders Write will
// create, outermost first, and refuses what Write refuses.
func TestMissingDirs(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "x.json")
	got, err := MissingDirs(path)
	if want := []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b")}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("MissingDirs = %v %v, want %v", got, err, want)
	}
	created, err := Write(path, ours)
	if err != nil || !reflect.DeepEqual(created, got) {
		t.Errorf("Write created %v %v, MissingDirs said %v", created, err, got)
	}
	if got, err := MissingDirs(path); err != nil || len(got) != 0 {
		t.Errorf("MissingDirs after Write = %v %v", got, err)
	}
	if _, err := MissingDirs("/"); err == nil {
		t.Error("MissingDirs(/) accepted")
	}
}
