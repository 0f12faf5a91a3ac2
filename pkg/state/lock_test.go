package state

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
)

// holdLockEnv makes the test binary a lock holder process (see TestMain).
const holdLockEnv = "STATE_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if name := os.Getenv(holdLockEnv); name != "" {
		os.Exit(holdLock(name))
	}
	leakcheck.Main(m)
}

// holdLock takes the flock on name, says "locked" and holds it until its
// stdin closes.
func holdLock(name string) int {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func TestWritableAndLockNeedDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "regular")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dir     string
		wantErr error
	}{
		{"fresh dir", filepath.Join(t.TempDir(), "a", "b"), nil},
		{"under a regular file", filepath.Join(file, "state"), ErrNoStateDir},
		{"deeper under a regular file", filepath.Join(file, "a", "state"), ErrNoStateDir},
		{"a regular file", file, ErrUnsafePath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.dir)
			if err := s.Writable(); (err != nil) != (tt.wantErr != nil) {
				t.Errorf("Writable() = %v, want error %v", err, tt.wantErr)
			}
			unlock, err := s.Lock(time.Second)
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Lock() = %v, want %v", err, tt.wantErr)
			}
			if !errors.Is(tt.wantErr, ErrNoStateDir) && errors.Is(err, ErrNoStateDir) {
				t.Errorf("Lock() = %v: ErrNoStateDir for an existing path", err)
			}
			if err == nil {
				unlock()
			}
		})
	}
}

func TestLockExcludes(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	unlock, err := s.Lock(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan func(), 1)
	go func() {
		u, err := New(s.dir).Lock(20 * time.Second)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		acquired <- u
	}()
	select {
	case <-acquired:
		t.Fatal("second Lock acquired while the first was held")
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	unlock() // idempotent
	select {
	case u := <-acquired:
		u()
		u()
	case <-time.After(10 * time.Second):
		t.Fatal("second Lock not acquired after unlock")
	}
}

// holder takes the node lock of dir by other means than Store.Lock and
// returns its release function and the pid /proc/locks shows for it.
type holder func(t *testing.T, dir string) (release func(), pid int)

func holdInProcess(t *testing.T, dir string) (func(), int) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }, os.Getpid()
}

func holdInChild(t *testing.T, dir string) (func(), int) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdLockEnv+"="+filepath.Join(dir, lockFileName))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		t.Fatalf("holder process said %q, %v", line, err)
	}
	return func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("holder process: %v", err)
		}
	}, cmd.Process.Pid
}

func TestLockTimeout(t *testing.T) {
	tests := []struct {
		name    string
		hold    holder
		timeout time.Duration
	}{
		{"other descriptor", holdInProcess, 300 * time.Millisecond},
		{"other process", holdInChild, 300 * time.Millisecond},
		{"other process, no wait", holdInChild, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "state"))
			unlock, err := s.Lock(0) // creates dir and lock file
			if err != nil {
				t.Fatal(err)
			}
			unlock()
			release, pid := tt.hold(t, s.dir)
			start := time.Now()
			_, err = s.Lock(tt.timeout)
			waited := time.Since(start)
			if !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), filepath.Join(s.dir, lockFileName)) {
				t.Errorf("Lock = %v, want ErrLockTimeout naming the lock file", err)
			}
			if want := fmt.Sprintf("held by pid %d)", pid); err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("Lock = %v, want it to say %q", err, want)
			}
			// Only the lower bound: on 2 loaded cores under -race the wake-up
			// after the timeout can take any time (make bench measures speed).
			if waited < tt.timeout {
				t.Errorf("Lock gave up after %v, before its timeout %v", waited, tt.timeout)
			}
			release()
			unlock, err = s.Lock(tt.timeout)
			if err != nil {
				t.Fatalf("Lock after the holder left: %v", err)
			}
			unlock()
		})
	}
}
