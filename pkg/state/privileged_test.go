package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"golang.org/x/sys/unix"
)

// TestLockReadOnlyParent checks that a state directory that is missing
// under a read-only mount cannot exist, which Lock reports as
// ErrNoStateDir; an existing one on the same mount is not
// ErrNoStateDir.
func TestLockReadOnlyParent(t *testing.T) {
	testenv.Privileged(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.Mkdir(filepath.Join(mnt, "existing"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	for _, tt := range []struct {
		dir   string
		noDir bool
	}{
		{filepath.Join(mnt, "state"), true},
		{filepath.Join(mnt, "a", "state"), true},
		{filepath.Join(mnt, "existing"), false},
	} {
		unlock, err := New(tt.dir).Lock(time.Second)
		if err == nil {
			unlock()
		}
		if err == nil || errors.Is(err, ErrNoStateDir) != tt.noDir {
			t.Errorf("Lock(%s) = %v, want an error, ErrNoStateDir %v", tt.dir, err, tt.noDir)
		}
	}
}
