package conflist

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const primaryList = `{"cniVersion":"1.0.0","name":"calico","plugins":[{"type":"calico"},{"type":"portmap"}]}`

// TestPrimary checks that the primary is the first *.conf, *.conflist or
// *.json in lexical order, as runtimes choose; a symlink or FIFO there is
// refused, never followed or skipped; an empty directory has none.
func TestPrimary(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    string // base name, or "" with wantErr
		wantErr string
	}{
		{"lexically first", func(t *testing.T, dir string) {
			write(t, dir, "20-b.conflist", primaryList)
			write(t, dir, "10-a.conf", primaryList)
			write(t, dir, "05-notes.txt", "x")
		}, "10-a.conf", ""},
		{"json counts", func(t *testing.T, dir string) {
			write(t, dir, "99-z.conflist", primaryList)
			write(t, dir, "00-a.json", primaryList)
		}, "00-a.json", ""},
		{"symlink first", func(t *testing.T, dir string) {
			write(t, dir, "20-real.conflist", primaryList)
			if err := os.Symlink(filepath.Join(dir, "20-real.conflist"), filepath.Join(dir, "10-link.conflist")); err != nil {
				t.Fatal(err)
			}
		}, "", "10-link.conflist, the first conflist of " + "DIR: it is a symlink"},
		{"fifo first", func(t *testing.T, dir string) {
			write(t, dir, "20-real.conflist", primaryList)
			if err := syscall.Mkfifo(filepath.Join(dir, "10-fifo.conflist"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "", "10-fifo.conflist, the first conflist of DIR: not a regular file"},
		{"none", func(t *testing.T, dir string) { write(t, dir, "README", "x") }, "", "no conflist in DIR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			got, err := Primary(dir)
			if tt.wantErr != "" {
				if want := strings.ReplaceAll(tt.wantErr, "DIR", dir); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Primary = %q, %v; want error %q", got, err, want)
				}
				return
			}
			if err != nil || got != filepath.Join(dir, tt.want) {
				t.Errorf("Primary = %q, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := Primary(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing directory: no error")
	}
}

// TestWaitPrimary checks that WaitPrimary waits for the primary's agent
// to write its conflist, and says how long it waited when none came.
func TestWaitPrimary(t *testing.T) {
	dir := t.TempDir()
	go func() {
		time.Sleep(200 * time.Millisecond)
		write(t, dir, "10-calico.conflist", primaryList)
	}()
	if got, err := WaitPrimary(dir, 10*time.Second, nil); err != nil || got != filepath.Join(dir, "10-calico.conflist") {
		t.Errorf("WaitPrimary = %q, %v", got, err)
	}
	if _, err := WaitPrimary(t.TempDir(), 1200*time.Millisecond, nil); !errors.Is(err, ErrNoConflist) || !strings.Contains(err.Error(), "after 1.2s") {
		t.Errorf("nothing written: %v", err)
	}
}

func TestRemove(t *testing.T) {
	in := "{\"plugins\": [\n  {\"type\": \"calico\"},\n  {\"type\": \"rdma-chain\", \"mode\": \"shared\"},\n  {\"type\": \"portmap\"}\n]}"
	out, had, err := Remove([]byte(in))
	if want := "{\"plugins\": [\n  {\"type\": \"calico\"},\n  {\"type\": \"portmap\"}\n]}"; err != nil || !had || string(out) != want {
		t.Errorf("Remove = %q, %v, %v; want %q", out, had, err, want)
	}
	again, had, err := Remove(out)
	if err != nil || had || string(again) != string(out) {
		t.Errorf("Remove without an entry = %q, %v, %v", again, had, err)
	}
	if _, _, err := Remove([]byte(`{"type":"calico"}`)); err == nil {
		t.Error("not a conflist: no error")
	}
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Error(err)
	}
}
