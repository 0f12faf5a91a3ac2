package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// binTree is an image root (src) and a host CNI bin dir (dst) in a temp dir.
type binTree struct{ src, dst string }

func newBinTree(t *testing.T) binTree {
	t.Helper()
	b := binTree{src: filepath.Join(t.TempDir(), "image"), dst: filepath.Join(t.TempDir(), "bin")}
	for _, d := range []string{b.src, b.dst} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b.put(t, b.src, conflist.PluginType, "plugin v1")
	b.put(t, b.src, hookcmd.Binary, "hook v1")
	return b
}

func (binTree) put(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}
}

// installed returns the content of name in dst ("" when absent) and fails
// on a mode other than 0755.
func (b binTree) installed(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(b.dst, name)
	st, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v %v", name, st.Mode(), err)
	}
	data, _ := os.ReadFile(p)
	return string(data)
}

func TestInstallBinaries(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, b binTree)
		// want is what the command prints for each binary, in order, or the
		// error it must fail with.
		want    []string
		wantErr string
		// the binaries' contents afterwards ("" = absent)
		hook, plugin string
	}{
		{"fresh", nil, []string{"installed", "installed"}, "", "hook v1", "plugin v1"},
		{"same again", func(t *testing.T, b binTree) {
			b.put(t, b.dst, conflist.PluginType, "plugin v1")
			b.put(t, b.dst, hookcmd.Binary, "hook v1")
		}, []string{"unchanged", "unchanged"}, "", "hook v1", "plugin v1"},
		{"upgrade", func(t *testing.T, b binTree) {
			b.put(t, b.dst, conflist.PluginType, "plugin v0")
			b.put(t, b.dst, hookcmd.Binary, "hook v1")
		}, []string{"unchanged", "replaced"}, "", "hook v1", "plugin v1"},
		{"same bytes, wrong mode", func(t *testing.T, b binTree) {
			b.put(t, b.dst, conflist.PluginType, "plugin v1")
			if err := os.Chmod(filepath.Join(b.dst, conflist.PluginType), 0o777); err != nil {
				t.Fatal(err)
			}
		}, []string{"installed", "replaced"}, "", "hook v1", "plugin v1"},
		{"leftovers of killed runs are swept", func(t *testing.T, b binTree) {
			b.put(t, b.dst, ".rdma-chain.tmp", "old shell installer")
			b.put(t, b.dst, ".rdma-chain.tmp-0123456789ab", "killed run")
			b.put(t, b.dst, ".rdma-chain-smc-hook.tmp-0123456789ab", "killed run")
		}, []string{"installed", "installed"}, "", "hook v1", "plugin v1"},
		{"plugin missing from the image: hook still first", func(t *testing.T, b binTree) {
			if err := os.Remove(filepath.Join(b.src, conflist.PluginType)); err != nil {
				t.Fatal(err)
			}
		}, []string{"installed"}, "does not exist", "hook v1", ""},
		{"hook missing from the image: plugin not installed", func(t *testing.T, b binTree) {
			if err := os.Remove(filepath.Join(b.src, hookcmd.Binary)); err != nil {
				t.Fatal(err)
			}
		}, nil, "does not exist", "", ""},
		{"symlinked source binary", func(t *testing.T, b binTree) {
			if err := os.Remove(filepath.Join(b.src, conflist.PluginType)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/passwd", filepath.Join(b.src, conflist.PluginType)); err != nil {
				t.Fatal(err)
			}
		}, []string{"installed"}, "it is a symlink", "hook v1", ""},
		{"source binary not a regular file", func(t *testing.T, b binTree) {
			if err := os.Remove(filepath.Join(b.src, conflist.PluginType)); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(b.src, conflist.PluginType), 0o755); err != nil {
				t.Fatal(err)
			}
		}, []string{"installed"}, "not a regular file", "hook v1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBinTree(t)
			if tt.prepare != nil {
				tt.prepare(t, b)
			}
			done, err := Binaries(b.src, b.dst, PluginBinaries)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
			if len(done) != len(tt.want) {
				t.Fatalf("done %q, want %q", done, tt.want)
			}
			for i, d := range done {
				if want := b.dst + "/" + PluginBinaries[i] + ": " + tt.want[i]; d != want {
					t.Errorf("done[%d] = %q, want %q", i, d, want)
				}
			}
			if got := b.installed(t, hookcmd.Binary); got != tt.hook {
				t.Errorf("hook %q, want %q", got, tt.hook)
			}
			if got := b.installed(t, conflist.PluginType); got != tt.plugin {
				t.Errorf("plugin %q, want %q", got, tt.plugin)
			}
			if left, _ := filepath.Glob(filepath.Join(b.dst, ".*")); len(left) != 0 {
				t.Errorf("hidden files left: %v", left)
			}
		})
	}
}

// TestInstallBinariesNeverFollowSymlinks checks that a symlinked bin dir
// or binary in the bin dir is refused and what it points at stays as it
// was.
func TestInstallBinariesNeverFollowSymlinks(t *testing.T) {
	t.Run("bin dir", func(t *testing.T) {
		b := newBinTree(t)
		link := filepath.Join(t.TempDir(), "bin")
		if err := os.Symlink(b.dst, link); err != nil {
			t.Fatal(err)
		}
		done, err := Binaries(b.src, link, PluginBinaries)
		if err == nil || !strings.Contains(err.Error(), "it is a symlink") || len(done) != 0 {
			t.Fatalf("done %q err %v", done, err)
		}
		if left, _ := os.ReadDir(b.dst); len(left) != 0 {
			t.Errorf("written through the link: %v", left)
		}
	})
	t.Run("binary", func(t *testing.T) {
		b := newBinTree(t)
		target := filepath.Join(t.TempDir(), "elsewhere")
		b.put(t, filepath.Dir(target), "elsewhere", "operator's own")
		if err := os.Symlink(target, filepath.Join(b.dst, conflist.PluginType)); err != nil {
			t.Fatal(err)
		}
		done, err := Binaries(b.src, b.dst, PluginBinaries)
		if err == nil || !strings.Contains(err.Error(), "it is a symlink") || len(done) != 1 {
			t.Fatalf("done %q err %v", done, err)
		}
		if data, _ := os.ReadFile(target); string(data) != "operator's own" {
			t.Errorf("link target now %q", data)
		}
		if dest, err := os.Readlink(filepath.Join(b.dst, conflist.PluginType)); err != nil || dest != target {
			t.Errorf("link now %q %v", dest, err)
		}
	})
}
