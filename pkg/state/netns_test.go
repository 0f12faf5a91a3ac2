package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestNetnsInode(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	own := fi.Sys().(*syscall.Stat_t).Ino
	link := filepath.Join(t.TempDir(), "link")
	symlink(t, "/proc/self/ns/net", link)
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "")
	tests := []struct {
		name, path string
		wantErr    string // "" for own
		gone       bool   // the error says the netns is gone
	}{
		{"own netns", "/proc/self/ns/net", "", false},
		{"link to it", link, "", false},
		{"mount namespace", "/proc/self/ns/mnt", "not a network namespace", false},
		{"regular file", file, "not a namespace", true},
		{"directory", t.TempDir(), "not a namespace", true},
		{"missing", filepath.Join(t.TempDir(), "none"), "no such file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ino, err := NetnsInode(tt.path)
			if tt.wantErr == "" {
				if err != nil || ino != own {
					t.Errorf("NetnsInode = %d, %v; want %d", ino, err, own)
				}
				return
			}
			if errors.Is(err, ErrNetnsGone) != tt.gone {
				t.Errorf("errors.Is(%v, ErrNetnsGone) != %v", err, tt.gone)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("NetnsInode = %d, %v; want an error naming the path with %q", ino, err, tt.wantErr)
			}
		})
	}
}
