package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// keyLockDirName is the folder of the attachments' key locks: an empty
// file per attachment while a call holds its lock, named as its record
// with keyLockSuffix.
const (
	keyLockDirName = "keys"
	keyLockSuffix  = ".lock"
)

// keyLockName is the name of k's key lock file in keys/.
func keyLockName(k Key) string {
	return strings.TrimSuffix(fileName(k), recordSuffix) + keyLockSuffix
}

// LockKey takes the key lock of k: an exclusive flock on keys/<the record's
// name>.lock, waiting at most timeout (a timeout <= 0 tries once). The
// plugin calls about one attachment hold it from their first look at its
// record to their last change, so two of them never interleave: the
// runtime's DEL and the reconcile daemon's, or a DEL and a new ADD of the
// same container and interface (a release would otherwise give back
// leases the new ADD took under the same names). It is taken before the
// node lock, never while holding it (TryLockKey may be). The returned
// unlock removes the lock file, then lets go: the file exists only while a
// call holds it, or after a killed call, so no file outlives the calls
// (an older plugin that knows no key locks finds none to remove). Errors
// are Lock's: ErrLockTimeout, ErrNoStateDir, ErrUnsafePath.
func (s *Store) LockKey(k Key, timeout time.Duration) (unlock func(), err error) {
	dir, err := s.ensureSubdir(keyLockDirName)
	if err != nil {
		return nil, err
	}
	name := filepath.Join(dir, keyLockName(k))
	deadline := time.Now().Add(timeout)
	for {
		f, err := openLockFile(name)
		if err != nil {
			return nil, err
		}
		if err := flockWithin(f, time.Until(deadline)); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w %s after %v", ErrLockTimeout, name, timeout)
			}
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if named(f, name) {
			return sync.OnceFunc(func() {
				_ = os.Remove(name)
				_ = f.Close()
			}), nil
		}
		// The holder before removed the file as it let go: this flock
		// is on a file no later call opens.
		f.Close()
	}
}

// TryLockKey takes k's key lock if nobody holds it, without waiting; it
// reports false when another call does. A call that holds the node lock
// or another attachment's key lock takes a key lock only so.
func (s *Store) TryLockKey(k Key) (unlock func(), ok bool, err error) {
	unlock, err = s.LockKey(k, 0)
	if errors.Is(err, ErrLockTimeout) {
		return nil, false, nil
	}
	return unlock, err == nil, err
}

// named reports whether name still names the file f has open.
func named(f *os.File, name string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Lstat(name)
	return err == nil && os.SameFile(held, now)
}

// sweepKeyLocks removes the key lock files nobody holds: calls killed
// before their unlock left them.
func (s *Store) sweepKeyLocks() error {
	dir := filepath.Join(s.dir, keyLockDirName)
	if err := checkDir(dir); absent(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("sweep key locks: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("sweep key locks: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), keyLockSuffix) {
			continue
		}
		if _, err := removeUnheld(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("sweep key locks: %w", err))
		}
	}
	return errors.Join(errs...)
}

// DropKeyLock removes k's key lock file if no call holds it (a killed
// call left it). It reports whether a call holds it: for a DEL that finds
// no record, an ADD under way that has not recorded k yet.
func (s *Store) DropKeyLock(k Key) (held bool, err error) {
	return removeUnheld(filepath.Join(s.dir, keyLockDirName, keyLockName(k)))
}

// removeUnheld removes the lock file name if no call holds its flock, and
// reports whether one does.
func removeUnheld(name string) (held bool, err error) {
	f, err := os.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if absent(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
		return true, nil
	}
	if err != nil || !named(f, name) {
		return false, err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return false, nil
}
