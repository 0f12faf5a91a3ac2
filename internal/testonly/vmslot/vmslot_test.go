package vmslot

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		env   string
		want  int
		isErr bool
	}{
		{"1", 1, false},
		{"3", 3, false},
		{"0", 0, true},
		{"-2", 0, true},
		{"two", 0, true},
		{"257", 0, true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("RC_VM_SLOTS", tc.env)
			n, err := Count()
			if (err != nil) != tc.isErr || n != tc.want {
				t.Fatalf("Count() = %d, %v; want %d, error %v", n, err, tc.want, tc.isErr)
			}
		})
	}
}

// TestAcquire checks that RC_VM_SLOTS guests run at once, that a
// released slot is taken again, and a directory that is not the caller's
// own is refused.
func TestAcquire(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	t.Setenv("RC_VM_SLOTS_DIR", dir)
	t.Setenv("RC_VM_SLOTS", "2")
	a, err := Acquire(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name == b.Name {
		t.Fatalf("both hold %s", a.Name)
	}
	if _, err := Acquire(300 * time.Millisecond); err == nil {
		t.Fatal("a third guest got a slot of 2")
	}
	a.Release()
	a.Release()
	c, err := Acquire(time.Second)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if c.Name != a.Name {
		t.Fatalf("took %s, the free one is %s", c.Name, a.Name)
	}
	c.Release()
	if _, err := AcquireN(2, 300*time.Millisecond); err == nil {
		t.Fatal("two slots at once while one of 2 is held")
	}
	if _, err := AcquireN(3, time.Second); err == nil {
		t.Fatal("three slots of 2")
	}
	b.Release()
	both, err := AcquireN(2, time.Second)
	if err != nil {
		t.Fatalf("two free slots: %v", err)
	}
	for _, s := range both {
		s.Release()
	}

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{link, open} {
		t.Setenv("RC_VM_SLOTS_DIR", d)
		if s, err := Acquire(time.Second); err == nil {
			s.Release()
			t.Errorf("%s: slot taken", d)
		}
	}
}

// TestWaiterFirst checks that a caller that releases its slot and asks
// again waits behind the one that was waiting, which gets the slot.
func TestWaiterFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	t.Setenv("RC_VM_SLOTS_DIR", dir)
	t.Setenv("RC_VM_SLOTS", "1")
	a, err := Acquire(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var b *Slot
	go func() {
		var err error
		b, err = Acquire(10 * time.Second)
		got <- err
	}()
	// The waiter holds the gate while it waits.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, f, err := tryLock(filepath.Join(dir, "gate"))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		f.Close()
		if time.Now().After(end) {
			t.Fatal("the waiter never took the gate")
		}
	}
	a.Release()
	if again, err := Acquire(time.Second); err == nil {
		again.Release()
		t.Fatal("the slot went back to the caller that had just released it")
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	b.Release()
}

// TestShellAgrees checks that a slot held by scripts/vm/slot.sh is not
// handed out here, and the shell waits for the one held here.
func TestShellAgrees(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock(1) (util-linux) missing: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "slots")
	t.Setenv("RC_VM_SLOTS_DIR", dir)
	t.Setenv("RC_VM_SLOTS", "1")
	script := filepath.Join(testenv.RepoRoot(), "scripts/vm/slot.sh")
	cmd := exec.Command("bash", "-c", `. "$1"; slot_acquire 2>/dev/null && echo "held $SLOT_NAME"; read -r _; slot_release; echo released`, "sh", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "held slot-0" {
		t.Fatalf("shell: %q %v", lines.Text(), lines.Err())
	}
	if s, err := Acquire(500 * time.Millisecond); err == nil {
		s.Release()
		t.Fatal("got the slot the shell holds")
	}
	stdin.Write([]byte("\n"))
	if !lines.Scan() || lines.Text() != "released" {
		t.Fatalf("shell: %q %v", lines.Text(), lines.Err())
	}
	s, err := Acquire(5 * time.Second)
	if err != nil {
		t.Fatalf("after the shell released: %v", err)
	}
	defer s.Release()
	cmd.Wait()

	out, err := exec.Command("timeout", "1", "bash", "-c", `. "$1"; slot_acquire`, "sh", script).CombinedOutput()
	if err == nil || strings.Contains(string(out), "slot.sh: slot-0") {
		t.Fatalf("the shell took the slot held here: %v %s", err, out)
	}
}
