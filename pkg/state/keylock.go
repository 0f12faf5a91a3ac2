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
	dir := filepath.Join(s.dir, keyLockDirName)
	if err := checkDir(dir); absent(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("drop key lock: %w", err)
	}
	return removeUnheld(filepath.Join(dir, keyLockName(k)))
}

// removeLooks bounds how often removeUnheld looks at a lock file that is
// replaced while it looks.
const removeLooks = 5

// removeUnheld removes the lock file name if no call holds its flock, and
// reports whether one does. A file replaced at name while it looked (its
// holder removed it as it let go, and another call made a new one) is
// looked at again; one replaced at every look counts as held.
func removeUnheld(name string) (held bool, err error) {
	for range removeLooks {
		f, err := os.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if absent(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		held, replaced, err := removeIfUnheld(f, name)
		f.Close()
		if !replaced {
			return held, err
		}
	}
	return true, nil
}

// removeIfUnheld removes name, which f was opened as, if no call holds
// f's flock. It reports held when a call does, and replaced when, once
// the flock was had, name no longer named f's file: then the file at name,
// if any, is another call's, and this look says nothing about it.
func removeIfUnheld(f *os.File, name string) (held, replaced bool, err error) {
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
		return true, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if !named(f, name) {
		return false, true, nil
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, false, err
	}
	return false, false, nil
}
