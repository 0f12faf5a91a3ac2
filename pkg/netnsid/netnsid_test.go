package netnsid

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestOfAndGone reads real paths: the test's own netns (directly and
// through a symbolic link), another namespace type, and what a runtime
// leaves behind (a plain file or directory, nothing at all).
func TestOfAndGone(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	own := fi.Sys().(*syscall.Stat_t).Ino
	dir := t.TempDir()
	link, file := filepath.Join(dir, "link"), filepath.Join(dir, "file")
	if err := os.Symlink("/proc/self/ns/net", link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		wantErr    string // "" for own
		gone       bool
	}{
		{"own netns", "/proc/self/ns/net", "", false},
		{"link to it", link, "", false},
		{"mount namespace", "/proc/self/ns/mnt", "not a network namespace", false},
		{"regular file", file, "not a namespace", true},
		{"directory", t.TempDir(), "not a namespace", true},
		{"missing", filepath.Join(dir, "none"), "no such file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if gone, err := Gone(tt.path); gone != tt.gone || err != nil {
				t.Errorf("Gone = %v, %v; want %v, nil", gone, err, tt.gone)
			}
			id, err := Of(tt.path)
			if tt.wantErr == "" {
				// The cookie is read inside the netns: entering one, even
				// its own, takes CAP_SYS_ADMIN.
				root := os.Geteuid() == 0
				if id.Inode != own || (err == nil) != root || (id.Cookie != 0) != root {
					t.Errorf("Of = %+v, %v; want inode %d, a cookie only as root", id, err, own)
				}
				return
			}
			if errors.Is(err, ErrGone) != tt.gone {
				t.Errorf("errors.Is(%v, ErrGone) != %v", err, tt.gone)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("Of = %+v, %v; want an error naming the path with %q", id, err, tt.wantErr)
			}
		})
	}
}

// TestGoneWithItsProcess checks that /proc/<pid>/ns/net is gone (ENOENT
// from the kernel) once the process has exited, as a zombie and once
// reaped.
func TestGoneWithItsProcess(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	path := "/proc/" + pid + "/ns/net"
	if gone, err := Gone(path); gone || err != nil {
		t.Fatalf("Gone(%s) of a running process = %v, %v", path, gone, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		return err == nil && strings.Contains(string(stat), ") Z "), "process not a zombie yet: " + string(stat)
	})
	for _, when := range []string{"zombie", "reaped"} {
		if when == "reaped" {
			_ = cmd.Wait()
		}
		if gone, err := Gone(path); !gone || err != nil {
			t.Errorf("Gone(%s) of a %s process = %v, %v; want true", path, when, gone, err)
		}
		if _, err := Of(path); !errors.Is(err, ErrGone) || !errors.Is(err, syscall.ENOENT) {
			t.Errorf("Of(%s) of a %s process = %v; want ErrGone from ENOENT", path, when, err)
		}
	}
}
