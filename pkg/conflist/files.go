package conflist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WaitFor polls for path to exist, for at most d.
func WaitFor(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Lstat(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return nil // ReadNoFollow says what is wrong with it
		}
		if !time.Now().Before(deadline) {
			if d > 0 {
				return fmt.Errorf("no %s after %v", path, d)
			}
			return nil
		}
		time.Sleep(min(time.Second, time.Until(deadline)))
	}
}

// ReadNoFollow reads a regular file that is not a symlink.
func ReadNoFollow(path string) ([]byte, os.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("refusing %s: it is a symlink", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("refusing %s: not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf.Bytes(), st, nil
}

// ErrChanged means the file no longer holds what it held when it was read, so
// nothing was written over it.
var ErrChanged = errors.New("changed since it was read")

// WriteAtomic replaces path with data through a synced temp file in the
// same directory, keeping the original's mode and owner.
func WriteAtomic(path string, data []byte, orig os.FileInfo) error {
	return ReplaceIfUnchanged(path, nil, data, orig)
}

// ReplaceIfUnchanged is WriteAtomic that renames over path only while it
// still holds was (nil: whatever it holds). It reads the file again once
// the temp file is synced, right before the rename, and returns ErrChanged
// with nothing written when another writer (the primary's agent) replaced
// or rewrote it since was was read, so that its write is never replaced by
// an edit of an older version.
func ReplaceIfUnchanged(path string, was, data []byte, orig os.FileInfo) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".rdma-chain-install-*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(orig.Mode().Perm())
	}
	if sys, ok := orig.Sys().(*syscall.Stat_t); ok && err == nil {
		if cerr := f.Chown(int(sys.Uid), int(sys.Gid)); cerr != nil && int(sys.Uid) != os.Getuid() {
			err = cerr
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil && was != nil {
		err = unchanged(path, was)
	}
	if err == nil {
		err = renameOverRegular(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// unchanged reads path again and compares it with was.
func unchanged(path string, was []byte) error {
	now, _, err := ReadNoFollow(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(now, was) {
		return ErrChanged
	}
	return nil
}

// renameOverRegular renames tmp to path unless path became a symlink.
func renameOverRegular(tmp, path string) error {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("refusing %s: it became a symlink", path)
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
