package state

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxQuarantined is how many quarantined files Quarantine keeps; older ones
// are removed.
const MaxQuarantined = 32

// Quarantine moves the file at path, a record path inside attachments/ that
// Get or List reported as corrupt, to <dir>/quarantine/<base>.<unix-nanos>
// and returns its new path. Whatever is at path (a regular file, a symbolic
// link, a directory) is moved as it is, never followed. Only the newest
// MaxQuarantined entries of quarantine/ are kept. The caller must hold the
// node lock.
func (s *Store) Quarantine(path string) (string, error) {
	if err := s.checkRecordPath(path); err != nil {
		return "", err
	}
	qdir, err := s.ensureSubdir(quarDirName)
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	dst, err := freeName(qdir, filepath.Base(path))
	if err == nil {
		err = os.Rename(path, dst)
	}
	if err == nil {
		err = errors.Join(syncDir(s.attachDir()), syncDir(qdir))
	}
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := prune(qdir, MaxQuarantined); err != nil {
		return dst, fmt.Errorf("quarantine %s: %w", path, err)
	}
	return dst, nil
}

// checkRecordPath accepts only a record file name directly in attachments/.
func (s *Store) checkRecordPath(path string) error {
	clean := filepath.Clean(path)
	base := filepath.Base(clean)
	if filepath.Dir(clean) != s.attachDir() || strings.HasPrefix(base, ".") || !strings.HasSuffix(base, recordSuffix) {
		return fmt.Errorf("quarantine %s: not a record path in %s", path, s.attachDir())
	}
	exists, err := s.checkAttachDir()
	if err != nil {
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	if !exists {
		return fmt.Errorf("quarantine %s: %w", path, fs.ErrNotExist)
	}
	return nil
}

// freeName returns qdir/<base>.<unix-nanos>, a name nothing is at yet.
func freeName(qdir, base string) (string, error) {
	for range 10 {
		name := filepath.Join(qdir, base+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		time.Sleep(time.Microsecond)
	}
	return "", fmt.Errorf("no free name for %s in %s", base, qdir)
}

// prune removes all but the keep newest entries of qdir, ordered by the
// unix-nanos suffix Quarantine gave them (entries without one go first).
func prune(qdir string, keep int) error {
	entries, err := os.ReadDir(qdir)
	if err != nil || len(entries) <= keep {
		return err
	}
	stamp := func(e fs.DirEntry) int64 {
		n := e.Name()
		v, err := strconv.ParseInt(n[strings.LastIndexByte(n, '.')+1:], 10, 64)
		if err != nil {
			return -1
		}
		return v
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int {
		return cmp.Or(cmp.Compare(stamp(a), stamp(b)), strings.Compare(a.Name(), b.Name()))
	})
	var errs []error
	for _, e := range entries[:len(entries)-keep] {
		// RemoveAll removes a quarantined directory without following
		// the links inside it.
		if err := os.RemoveAll(filepath.Join(qdir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// QuarantineKey quarantines the record of k: one that reads well but that
// the caller found cannot be true (it names the plugin's own netns as a
// pod's). The caller must hold the node lock.
func (s *Store) QuarantineKey(k Key) (string, error) {
	return s.Quarantine(s.path(k))
}
