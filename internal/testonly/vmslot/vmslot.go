// Package vmslot bounds how many qemu guests the test tiers run at once,
// across processes: a TCG guest is one busy host thread, so one guest per
// core keeps every guest at full speed while no core idles. The VM and node
// tiers run side by side (make test) and take slots from the same set; a
// slot is an flock(2) on one of RC_VM_SLOTS files (default: the number of
// CPUs) in RC_VM_SLOTS_DIR (default $TMPDIR/rdma-chain-vm-slots), and the
// one waiting holds the gate file there.
// scripts/vm/slot.sh is the same protocol for the shell tiers.
package vmslot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Slot is one held slot; Release gives it back.
type Slot struct {
	f    *os.File
	Name string        // slot-N
	Wait time.Duration // how long Acquire waited for it
}

// Release unlocks the slot; a second call does nothing.
func (s *Slot) Release() {
	if s == nil || s.f == nil {
		return
	}
	s.f.Close() // closing the only descriptor drops the flock
	s.f = nil
}

// Count is how many guests may run at once.
func Count() (int, error) {
	v := os.Getenv("RC_VM_SLOTS")
	if v == "" {
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 256 {
		return 0, fmt.Errorf("RC_VM_SLOTS=%q: want a whole number from 1 to 256", v)
	}
	return n, nil
}

// Dir is the directory the slot files live in.
func Dir() string {
	if d := os.Getenv("RC_VM_SLOTS_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "rdma-chain-vm-slots")
}

// Acquire blocks until a slot is free or timeout passes.
func Acquire(timeout time.Duration) (*Slot, error) {
	slots, err := AcquireN(1, timeout)
	if err != nil {
		return nil, err
	}
	return slots[0], nil
}

// AcquireN blocks until k slots are free at once (guests that must run
// together, as a cluster's nodes) or timeout passes. It holds no slot while
// it waits, so two callers never each hold part of what the other needs.
// A waiter first takes the gate file and keeps it until it has its slots:
// a caller that has just released a slot and asks again waits behind it,
// instead of taking that slot back before the waiter's next look.
func AcquireN(k int, timeout time.Duration) ([]*Slot, error) {
	n, err := Count()
	if err != nil {
		return nil, err
	}
	if k < 1 || k > n {
		return nil, fmt.Errorf("%d guests at once, but only %d VM slots (RC_VM_SLOTS)", k, n)
	}
	dir := Dir()
	if err := ownDir(dir); err != nil {
		return nil, err
	}
	start := time.Now()
	gate, err := lockWithin(filepath.Join(dir, "gate"), timeout)
	if err != nil {
		return nil, err
	}
	defer gate.Close()
	for {
		held, err := tryLockK(dir, n, k)
		if err != nil {
			return nil, err
		}
		if len(held) == k {
			for _, s := range held {
				s.Wait = time.Since(start)
			}
			return held, nil
		}
		release(held)
		if time.Since(start) > timeout {
			return nil, fmt.Errorf("no %d of the %d VM slots in %s free at once after %s", k, n, dir, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// tryLockK locks free slots, at most k of n, without waiting.
func tryLockK(dir string, n, k int) ([]*Slot, error) {
	var held []*Slot
	for i := 0; i < n && len(held) < k; i++ {
		name := fmt.Sprintf("slot-%d", i)
		ok, f, err := tryLock(filepath.Join(dir, name))
		if err != nil {
			release(held)
			return nil, err
		}
		if ok {
			held = append(held, &Slot{f: f, Name: name})
		}
	}
	return held, nil
}

// lockWithin locks path, looking every 50 ms until timeout passes.
func lockWithin(path string, timeout time.Duration) (*os.File, error) {
	start := time.Now()
	for {
		ok, f, err := tryLock(path)
		if err != nil || ok {
			return f, err
		}
		if time.Since(start) > timeout {
			return nil, fmt.Errorf("%s: still locked after %s", path, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func release(slots []*Slot) {
	for _, s := range slots {
		s.Release()
	}
}

// ownDir makes dir, or accepts it only as a real directory of this user:
// the tiers run as root, and a slot file is opened for writing.
func ownDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: not a directory of uid %d writable by it alone", dir, os.Geteuid())
	}
	return nil
}

func tryLock(path string) (bool, *os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return false, nil, err
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return true, f, nil
	}
	f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil, nil
	}
	return false, nil, fmt.Errorf("flock %s: %w", path, err)
}
