package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

var (
	// ErrUnsafePath is wrapped by every error refusing a path of the store
	// that is a symbolic link, of the wrong type, or open to other users.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrNoStateDir is wrapped by Lock when the state directory did not exist
	// and could not be created (its parent is a file, or read-only): no state
	// can exist then, which a DEL may take as "nothing to undo".
	ErrNoStateDir = errors.New("no state directory")
)

// checkDir verifies that the existing path is a real directory (not a
// symbolic link), owned by the plugin's user and not writable by every user.
// Group write is left to the operator.
// It returns an error wrapping fs.ErrNotExist when nothing is at path.
func checkDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrUnsafePath, path)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory (%v)", ErrUnsafePath, path, fi.Mode().Type())
	case fi.Mode().Perm()&0o002 != 0:
		// Even with the sticky bit, another user could create the lock
		// file (and hold it) or attachments/ first.
		return fmt.Errorf("%w: directory %s is writable by every user", ErrUnsafePath, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: directory %s is owned by uid %d, not %d", ErrUnsafePath, path, st.Uid, os.Geteuid())
	}
	return nil
}

// absent reports whether err from Lstat means nothing is at the path:
// ENOTDIR when a parent is not a directory counts as absent too.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// ensureDir makes sure the state directory exists and is safe, creating it
// (and its parents) with mode 0700 when it is missing.
func (s *Store) ensureDir() error {
	err := checkDir(s.dir)
	if err == nil {
		return nil
	}
	if !absent(err) {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := os.MkdirAll(s.dir, dirMode); err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrNoStateDir, s.dir, err)
	}
	if err := checkDir(s.dir); err != nil {
		return fmt.Errorf("state directory after creating it: %w", err)
	}
	return nil
}

// ensureSubdir makes sure the directory name under the state directory
// exists and is safe, creating it with mode 0700 when it is missing.
func (s *Store) ensureSubdir(name string) (string, error) {
	if err := s.ensureDir(); err != nil {
		return "", err
	}
	dir := filepath.Join(s.dir, name)
	err := checkDir(dir)
	if absent(err) {
		// Mkdir, unlike MkdirAll, fails on anything already at dir,
		// including a symbolic link created meanwhile.
		if err = os.Mkdir(dir, dirMode); err == nil || errors.Is(err, fs.ErrExist) {
			err = checkDir(dir)
		}
	}
	if err != nil {
		return "", fmt.Errorf("state subdirectory %s: %w", name, err)
	}
	return dir, nil
}

func (s *Store) ensureAttachDir() error {
	_, err := s.ensureSubdir(attachDirName)
	return err
}

// checkAttachDir verifies, without creating anything, that the state
// directory and attachments/ are safe. It reports false when either is
// missing: then no record exists.
func (s *Store) checkAttachDir() (bool, error) {
	for _, dir := range []string{s.dir, s.attachDir()} {
		err := checkDir(dir)
		if absent(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("attachment state: %w", err)
		}
	}
	return true, nil
}
