package validate

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFile checks that a FIFO, a device and an oversized file are
// refused before their content is read (each would block validate or
// grow without end).
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.conflist")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.conflist")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.conflist")
	if err := os.WriteFile(good, []byte(goodList), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{fifo, "not a regular file"},
		{"/dev/zero", "not a regular file"},
		{big, "more than a conflist's"},
		{filepath.Join(dir, "none"), "no such file"},
		{good, ""},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() {
			data, err := ReadFile(tt.path)
			if err == nil && string(data) != goodList {
				t.Errorf("%s: read %d bytes", tt.path, len(data))
			}
			done <- err
		}()
		select {
		case err := <-done:
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("ReadFile(%s) = %v, want %q", tt.path, err, tt.want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("ReadFile(%s) blocked", tt.path)
		}
	}
}
