package hookcmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

func TestStateAndListedRoundTrip(t *testing.T) {
	for _, st := range []hookmap.Status{
		{}, {Attached: true}, {Attached: true, Held: true},
		{Attached: true, Listed: []uint32{4026531840, 1, 4294967295}},
		{Attached: true, Held: true, Listed: []uint32{4026531841}},
	} {
		got, err := ParseState(FormatState(st))
		if err != nil || !reflect.DeepEqual(got, st) {
			t.Errorf("round trip of %+v: %+v %v", st, got, err)
		}
	}
	for _, bad := range []string{
		"", "attached 2\nheld 0\n", "attached 1\n", "attached 1\nheld 0\nx\n",
		"attached 1\nheld 0\n4294967296\n", "listed 1\nheld 0\n", "held 0\nattached 1\n",
		"attached 1\nheld 1\n0\n", // the hold key is no netns
	} {
		if _, err := ParseState(bad); err == nil {
			t.Errorf("ParseState(%q): no error", bad)
		}
	}
	for _, bad := range []string{"", "yes", "10"} {
		if _, err := ParseListed(bad); err == nil {
			t.Errorf("ParseListed(%q): no error", bad)
		}
	}
}

// script writes an executable shell script standing in for the binary.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), Binary)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunnerExec(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(script(t, "echo 1"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := (Runner{Path: filepath.Join(dir, "absent")}).Listed("/sys/fs/bpf/x", 1); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("absent binary: %v, want ErrNotInstalled", err)
	}
	if err := (Runner{}).Supported("/sys/fs/bpf/x"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("no path: %v, want ErrNotInstalled", err)
	}
	if _, err := (Runner{Path: link}).Listed("/sys/fs/bpf/x", 1); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("symlinked binary: %v, want a refusal", err)
	}
	err := Runner{Path: script(t, `echo "no BPF here: $1 $2 $3" >&2; exit 1`)}.Add("/sys/fs/bpf/x", 7)
	if err == nil || !strings.Contains(err.Error(), "no BPF here: add /sys/fs/bpf/x 7") {
		t.Errorf("failing binary: %v, want its stderr", err)
	}
	// The binary gets no environment (no CNI_* variables).
	if l, err := (Runner{Path: script(t, `[ -z "$(env | grep -v '^PWD=\|^SHLVL=\|^_=')" ] && echo 1 || echo 0`)}).Listed("/d", 1); err != nil || !l {
		t.Errorf("binary saw an environment: %v %v", l, err)
	}
}

var built = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "hookcmd")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, Binary)
	if b, err := testenv.GoCmd("build", "-o", out, "./cmd/rdma-chain-smc-hook").CombinedOutput(); err != nil {
		return "", errors.New(string(b))
	}
	return out, nil
})

// TestRealBinaryWithoutPins checks that the real binary on this kernel,
// with pins in a directory on a bpffs that holds none, finds nothing
// attached, nothing listed and nothing to remove, and that with pins in a
// directory that is not on a bpffs every operation fails naming it instead
// of reading the missing pins as "nothing listed". Attaching needs tracing
// programs on a bpffs, which the VM tier proves.
func TestRealBinaryWithoutPins(t *testing.T) {
	bin, err := built()
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{Path: bin}
	plain := filepath.Join(t.TempDir(), "pins")
	if _, err := r.State(plain); err == nil || !strings.Contains(err.Error(), "no bpffs mounted") {
		t.Errorf("State on a plain directory = %v, want no bpffs", err)
	}
	if _, err := r.Listed(plain, 4026531840); err == nil || !strings.Contains(err.Error(), "no bpffs mounted") {
		t.Errorf("Listed on a plain directory = %v, want no bpffs", err)
	}
	if err := r.Remove(plain, 4026531840); err == nil || !strings.Contains(err.Error(), "no bpffs mounted") {
		t.Errorf("Remove on a plain directory = %v, want no bpffs", err)
	}
	// A temp dir is no bpffs: Supported names what is missing.
	if err := r.Supported(plain); err == nil || !strings.Contains(err.Error(), "no ") {
		t.Errorf("Supported = %v, want what the kernel or the directory lacks", err)
	}
	testenv.RequireRoot(t)
	fs := t.TempDir()
	if err := unix.Mount("bpf", fs, "bpf", 0, "mode=0700"); err != nil {
		testenv.Unavailable(t, "cannot mount a bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(fs, unix.MNT_DETACH) })
	dir := filepath.Join(fs, "pins")
	if st, err := r.State(dir); err != nil || st.Attached || st.Held || st.Listed != nil {
		t.Errorf("State = %+v %v, want nothing", st, err)
	}
	if err := r.Release(dir); err != nil {
		t.Errorf("Release with nothing pinned = %v, want nil", err)
	}
	if l, err := r.Listed(dir, 4026531840); err != nil || l {
		t.Errorf("Listed = %v %v, want false", l, err)
	}
	if err := r.Remove(dir, 4026531840); err != nil {
		t.Errorf("Remove = %v, want nil", err)
	}
}

// TestRealBinaryAddLeavesNothingOnFailure runs Add on a bpffs: where the
// kernel refuses the program (this host refuses tracing programs with
// EPERM) nothing stays behind, not even the pin directory; where it
// accepts it, the netns is listed and Remove takes every pin away again.
func TestRealBinaryAddLeavesNothingOnFailure(t *testing.T) {
	testenv.RequireRoot(t)
	bin, err := built()
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{Path: bin}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("rdma-chain-test-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	const ino = 4026531840
	if err := r.Add(dir, ino); err != nil {
		if _, serr := os.Lstat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("Add failed (%v) and left %s: %v", err, dir, serr)
		}
		t.Logf("Add failed and left nothing: %v", err)
		return
	}
	if l, err := r.Listed(dir, ino); err != nil || !l {
		t.Fatalf("after Add: Listed = %v %v", l, err)
	}
	if err := r.Remove(dir, ino); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the last Remove %s remains: %v", dir, err)
	}
}
