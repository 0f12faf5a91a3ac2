package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// keyLockPath is where k's key lock lives in s.
func keyLockPath(s *Store, k Key) string {
	return filepath.Join(s.dir, keyLockDirName, keyLockName(k))
}

// TestLockKeyExcludes checks that a key lock keeps out a second holder of
// the same key only, and that its unlock removes the lock file whether or
// not the key has a record: an older plugin that releases the record
// knows no key locks, and would leave the file behind.
func TestLockKeyExcludes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		recorded bool
	}{
		{"no record", false},
		{"recorded", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "state"))
			k := Key{Network: "n", ContainerID: "c1", IfName: "eth0"}
			unlock, err := s.LockKey(k, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tt.recorded {
				if err := s.Put(&Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.LockKey(k, 50*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
				t.Errorf("second LockKey of the same key = %v, want ErrLockTimeout", err)
			}
			if _, ok, err := s.TryLockKey(k); ok || err != nil {
				t.Errorf("TryLockKey of a held key = %v, %v, want false, nil", ok, err)
			}
			other, ok, err := s.TryLockKey(Key{Network: "n", ContainerID: "c2", IfName: "eth0"})
			if !ok || err != nil {
				t.Fatalf("TryLockKey of another key = %v, %v", ok, err)
			}
			other()
			unlock()
			_, err = os.Lstat(keyLockPath(s, k))
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after unlock Lstat(lock file) = %v, want it gone", err)
			}
			again, ok, err := s.TryLockKey(k)
			if !ok || err != nil {
				t.Fatalf("TryLockKey after unlock = %v, %v", ok, err)
			}
			again()
		})
	}
}

// TestLockKeyWaiterTakesNewFile checks that a call waiting for a key lock
// whose holder removed the file as it let go ends up holding the lock file
// at the path, not the removed one: a third call is kept out.
func TestLockKeyWaiterTakesNewFile(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	k := Key{Network: "n", ContainerID: "c1", IfName: "eth0"}
	unlock, err := s.LockKey(k, 0)
	if err != nil {
		t.Fatal(err)
	}
	type taken struct {
		unlock func()
		err    error
	}
	waiter := make(chan taken, 1)
	go func() {
		u, err := s.LockKey(k, 10*time.Second)
		waiter <- taken{u, err}
	}()
	// The waiter opens the file before the holder lets go (it polls the
	// flock): wait until a second descriptor of it is open.
	deadline := time.Now().Add(10 * time.Second)
	for openCount(t, keyLockPath(s, k)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never opened the lock file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	unlock() // removes the file the waiter has open
	w := <-waiter
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.unlock()
	if _, ok, err := s.TryLockKey(k); ok || err != nil {
		t.Errorf("TryLockKey while the waiter holds it = %v, %v, want false, nil", ok, err)
	}
}

// openCount is how many of this process's descriptors have name open.
func openCount(t *testing.T, name string) int {
	t.Helper()
	want, err := os.Stat(name)
	if err != nil {
		return 0
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if fi, err := os.Stat(filepath.Join("/proc/self/fd", fd.Name())); err == nil && os.SameFile(fi, want) {
			n++
		}
	}
	return n
}

// TestSweepKeyLocks checks that Sweep, and DropKeyLock for each key,
// remove the key lock files nobody holds (killed calls', with or without a
// record, and with no attachments/ at all) and keep a held one.
func TestSweepKeyLocks(t *testing.T) {
	left := Key{Network: "n", ContainerID: "killed", IfName: "eth0"}
	held := Key{Network: "n", ContainerID: "adding", IfName: "eth0"}
	recorded := Key{Network: "n", ContainerID: "live", IfName: "eth0"}
	sweep := func(s *Store) error { _, err := s.Sweep(); return err }
	for _, tt := range []struct {
		name    string
		records bool // recorded has a record (attachments/ exists)
		remove  func(s *Store) error
	}{
		{"Sweep", true, sweep},
		{"Sweep without records", false, sweep},
		{"DropKeyLock", true, func(s *Store) error {
			var errs []error
			for _, k := range []Key{left, held, recorded} {
				isHeld, err := s.DropKeyLock(k)
				if isHeld != (k == held) {
					errs = append(errs, fmt.Errorf("DropKeyLock(%s) held=%v", k.ContainerID, isHeld))
				}
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "state"))
			unlock, err := s.LockKey(held, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			if tt.records {
				if err := s.Put(&Record{Network: recorded.Network, ContainerID: recorded.ContainerID, IfName: recorded.IfName}); err != nil {
					t.Fatal(err)
				}
			}
			// Killed calls' lock files: their unlocks never ran.
			for _, k := range []Key{left, recorded} {
				if err := os.WriteFile(keyLockPath(s, k), nil, fileMode); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.remove(s); err != nil {
				t.Fatal(err)
			}
			for _, want := range []struct {
				k    Key
				kept bool
			}{{left, false}, {held, true}, {recorded, false}} {
				_, err := os.Lstat(keyLockPath(s, want.k))
				if kept := err == nil; kept != want.kept {
					t.Errorf("%s: lock file kept=%v (%v), want %v", want.k.ContainerID, kept, err, want.kept)
				}
			}
		})
	}
}

// TestRemoveIfUnheldReplaced checks that a look at a key lock file whose
// holder removed it as it let go, while another call took the key again
// under a new file, does not report the key free (a DEL that finds no
// record would then end while an ADD of its attachment runs) and leaves
// the new file alone.
func TestRemoveIfUnheldReplaced(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	k := Key{Network: "n", ContainerID: "c1", IfName: "eth0"}
	first, err := s.LockKey(k, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := keyLockPath(s, k)
	looked, err := os.Open(name) // the look opens the first holder's file
	if err != nil {
		t.Fatal(err)
	}
	defer looked.Close()
	first()
	second, err := s.LockKey(k, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer second()
	if held, replaced, err := removeIfUnheld(looked, name); held || !replaced || err != nil {
		t.Errorf("removeIfUnheld(the removed file) = held %v, replaced %v, %v; want false, true, nil", held, replaced, err)
	}
	if held, err := s.DropKeyLock(k); !held || err != nil {
		t.Errorf("DropKeyLock of a key held under a new file = %v, %v; want true, nil", held, err)
	}
	if _, err := os.Lstat(name); err != nil {
		t.Errorf("the holder's new lock file: %v", err)
	}
}
