package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLockTimeout is wrapped by Lock and LockKey when another process held
// the lock for the whole wait.
var ErrLockTimeout = errors.New("timed out waiting for a lock")

const (
	lockPollMin = 5 * time.Millisecond
	lockPollMax = 20 * time.Millisecond
)

// Lock takes an exclusive flock on <dir>/lock, creating the directory (0700)
// and lock file (0600) if needed, waiting at most timeout for another holder
// to let go (a timeout <= 0 tries once). It fails with an error wrapping
// ErrLockTimeout when the wait ran out, ErrNoStateDir when the directory was
// missing and could not be created, and ErrUnsafePath when the directory or
// the lock file is a symbolic link or of the wrong type. The returned unlock
// function is idempotent.
func (s *Store) Lock(timeout time.Duration) (unlock func(), err error) {
	if err := s.ensureDir(); err != nil {
		return nil, err
	}
	name := filepath.Join(s.dir, lockFileName)
	f, err := openLockFile(name)
	if err != nil {
		return nil, err
	}
	if err := flockWithin(f, timeout); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if pids := lockHolders(f); len(pids) > 0 {
				return nil, fmt.Errorf("%w %s after %v (held by pid %s)", ErrLockTimeout, name, timeout, strings.Join(pids, ", "))
			}
			return nil, fmt.Errorf("%w %s after %v", ErrLockTimeout, name, timeout)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Closing the only descriptor of the open file releases the flock.
	return sync.OnceFunc(func() { _ = f.Close() }), nil
}

// openLockFile opens (creating it 0600 if needed) the lock file without
// following a symbolic link and checks, before and after, that it is a
// regular file. O_NONBLOCK keeps a FIFO planted at the path from blocking
// the open.
func openLockFile(name string) (*os.File, error) {
	if fi, err := os.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: lock file %s is not a regular file (%v)", ErrUnsafePath, name, fi.Mode().Type())
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, fileMode)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: lock file %s is a symbolic link", ErrUnsafePath, name)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: lock file %s is not a regular file (%v)", ErrUnsafePath, name, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// flockWithin polls a non-blocking exclusive flock on f until it is taken or
// timeout has passed, then returns the last EWOULDBLOCK.
func flockWithin(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	delay := lockPollMin
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || (!errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR)) {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return unix.EWOULDBLOCK
		}
		time.Sleep(min(delay, left))
		delay = min(delay*3/2, lockPollMax)
	}
}
