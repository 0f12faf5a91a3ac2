package state

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentWriters runs 16 workers, each with its own Store on one
// directory as separate plugin processes would, doing locked
// Put/Get/List/Delete/Sweep while STATUS-like Writable probes run unlocked.
// No call may fail, no record may be seen corrupt, nothing may be left.
func TestConcurrentWriters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	const workers, rounds = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := New(dir)
			for i := range rounds {
				if err := round(s, Key{"n", fmt.Sprintf("c%d-%d", w, i), "eth0"}); err != nil {
					errs <- err
				}
				if err := s.Writable(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if left := names(t, filepath.Join(dir, attachDirName)); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

var holders atomic.Int32

// round is one locked ADD-then-DEL of key k.
func round(s *Store, k Key) error {
	unlock, err := s.Lock(20 * time.Second)
	if err != nil {
		return err
	}
	defer unlock()
	if n := holders.Add(1); n != 1 {
		return fmt.Errorf("%d holders of the node lock at once", n)
	}
	defer holders.Add(-1)
	if _, err := s.Sweep(); err != nil {
		return err
	}
	if err := s.Put(&Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName}); err != nil {
		return err
	}
	if _, err := s.List(); err != nil {
		return err
	}
	if r, err := s.Get(k); err != nil || r.Key() != k {
		return fmt.Errorf("get %v: %v, %w", k, r, err)
	}
	if err := s.Delete(k); err != nil {
		return err
	}
	if _, err := s.Get(k); !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("get %v after delete: %w", k, err)
	}
	return nil
}
