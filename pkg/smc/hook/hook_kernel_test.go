//go:build smchook

// The kernel tests of the hook need a kernel that lets root load tracing
// programs and has update_socket_protocol (>= 6.6) and IPPROTO_SMC
// (>= 6.11): the VM tier builds them with -tags smchook and runs them in
// its Debian 6.12 guest (scenario smc-hook).

package hook

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// requireHookKernel stops t unless this kernel can run the hook.
func requireHookKernel(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	mountBPFFS(t)
	if err := Supported(); err != nil && !errors.Is(err, ErrNoIPPROTOSMC) {
		testenv.Unavailable(t, "kernel cannot run the SMC socket hook: %v", err)
	}
}

// mountBPFFS mounts a bpffs at /sys/fs/bpf where none is (as systemd
// does on a node).
func mountBPFFS(t *testing.T) {
	t.Helper()
	var fs unix.Statfs_t
	if unix.Statfs("/sys/fs/bpf", &fs) == nil && fs.Type == unix.BPF_FS_MAGIC {
		return
	}
	if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
		testenv.Unavailable(t, "cannot mount bpffs: %v", err)
	}
}

func testDir(t *testing.T) Hook {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf/rdma-chain-test", t.Name())
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(dir)) })
	return Hook{Dir: dir}
}

func inode(t *testing.T, n ns.NetNS) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(n.Path(), &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

// socketIn creates and closes a TCP socket (the way Go's net package does)
// inside n and returns the protocol the kernel gave it, or the error.
func socketIn(t *testing.T, n ns.NetNS, family int) (int, error) {
	t.Helper()
	var proto int
	err := n.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		proto, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
		return err
	})
	return proto, err
}

// TestHookSwitchesListedNetns checks, on the real kernel, that a listed
// netns's AF_INET stream sockets are created as IPPROTO_SMC (or refused
// where SMC is not loaded: the protocol was switched all the same), an
// unlisted netns and AF_INET6 are untouched; the last Remove detaches the
// program and removes the pins.
func TestHookSwitchesListedNetns(t *testing.T) {
	requireHookKernel(t)
	h := testDir(t)
	listed, plain := netnstest.NewNS(t), netnstest.NewNS(t)
	smcLoaded := Supported() == nil
	if err := h.Add(inode(t, listed)); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Listed(inode(t, listed)); !ok || err != nil {
		t.Fatalf("Listed = %v, %v", ok, err)
	}
	assertMapClientSees(t, h, inode(t, listed), inode(t, plain))
	proto, err := socketIn(t, listed, unix.AF_INET)
	switch {
	case smcLoaded && (err != nil || proto != ipprotoSMC):
		t.Errorf("listed netns: socket protocol %d, %v; want IPPROTO_SMC", proto, err)
	case !smcLoaded && !errors.Is(err, unix.EPROTONOSUPPORT):
		t.Errorf("listed netns without SMC in the kernel: %d, %v; want EPROTONOSUPPORT (protocol switched)", proto, err)
	}
	if proto, err := socketIn(t, plain, unix.AF_INET); err != nil || proto != unix.IPPROTO_TCP {
		t.Errorf("plain netns: protocol %d, %v; want TCP", proto, err)
	}
	if proto, err := socketIn(t, listed, unix.AF_INET6); err != nil || proto != unix.IPPROTO_TCP {
		t.Errorf("listed netns, AF_INET6: protocol %d, %v; want TCP", proto, err)
	}
	if err := h.Remove(inode(t, listed)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(h.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left in %s: %v", h.Dir, err)
	}
	if proto, err := socketIn(t, listed, unix.AF_INET); err != nil || proto != unix.IPPROTO_TCP {
		t.Errorf("after detach: protocol %d, %v; want TCP", proto, err)
	}
}

// assertMapClientSees checks that the plugin's map client opens the map
// the loader pinned as the hook's and reads what the loader listed.
func assertMapClientSees(t *testing.T, h Hook, listed, plain uint32) {
	t.Helper()
	m, err := hookmap.Open(h.Dir)
	if err != nil {
		t.Fatalf("hookmap.Open of the loaded hook's pins: %v", err)
	}
	defer m.Close()
	linked, err := m.Linked()
	if err != nil || !linked {
		t.Errorf("hookmap Linked = %v, %v; want true", linked, err)
	}
	for ino, want := range map[uint32]bool{listed: true, plain: false} {
		if got, err := m.Lookup(ino); err != nil || got != want {
			t.Errorf("hookmap Lookup(%d) = %v, %v; want %v", ino, got, err, want)
		}
	}
}

// TestHookReusesPins checks that a second Add reuses the pinned program;
// Remove of one of two keeps it.
func TestHookReusesPins(t *testing.T) {
	requireHookKernel(t)
	h := testDir(t)
	a, b := netnstest.NewNS(t), netnstest.NewNS(t)
	for _, n := range []ns.NetNS{a, b} {
		if err := h.Add(inode(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Remove(inode(t, a)); err != nil {
		t.Fatal(err)
	}
	st, err := h.State()
	if err != nil || !st.Attached || st.Held || len(st.Listed) != 1 || st.Listed[0] != inode(t, b) {
		t.Errorf("State = %+v %v; want attached with only b", st, err)
	}
	if err := h.Remove(inode(t, b)); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(inode(t, b)); err != nil {
		t.Errorf("Remove with nothing pinned: %v", err)
	}
}

// TestHookHeldBetweenPods checks that a held program stays attached with
// no pod listed: the last pod's Remove keeps it, the map client reads it
// as held and lists a pod without a load; Release with a pod listed keeps
// it for that pod, and the pod's Remove then detaches it. The hold key
// switches no netns's sockets.
func TestHookHeldBetweenPods(t *testing.T) {
	requireHookKernel(t)
	h := testDir(t)
	pod, plain := netnstest.NewNS(t), netnstest.NewNS(t)
	for _, step := range []struct {
		name string
		do   func() error
		want hookmap.Status
	}{
		{"hold", h.Hold, hookmap.Status{Attached: true, Held: true}},
		{"hold again", h.Hold, hookmap.Status{Attached: true, Held: true}},
		{"pod listed", func() error { return h.Add(inode(t, pod)) }, hookmap.Status{Attached: true, Held: true, Listed: []uint32{inode(t, pod)}}},
		{"last pod removed", func() error { return h.Remove(inode(t, pod)) }, hookmap.Status{Attached: true, Held: true}},
		{"pod listed again", func() error { return h.Add(inode(t, pod)) }, hookmap.Status{Attached: true, Held: true, Listed: []uint32{inode(t, pod)}}},
		{"released with a pod", h.Release, hookmap.Status{Attached: true, Listed: []uint32{inode(t, pod)}}},
		{"pod removed", func() error { return h.Remove(inode(t, pod)) }, hookmap.Status{}},
		{"released again", h.Release, hookmap.Status{}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		st, err := h.State()
		if err != nil || st.Attached != step.want.Attached || st.Held != step.want.Held || !slices.Equal(st.Listed, step.want.Listed) {
			t.Fatalf("%s: State = %+v, %v; want %+v", step.name, st, err, step.want)
		}
		if !st.Attached {
			continue
		}
		if proto, err := socketIn(t, plain, unix.AF_INET); err != nil || proto != unix.IPPROTO_TCP {
			t.Errorf("%s: an unlisted netns's socket is protocol %d, %v; want TCP", step.name, proto, err)
		}
	}
	if _, err := os.Lstat(h.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left in %s after the release and the last pod: %v", h.Dir, err)
	}
}

// BenchmarkSocketClose is what every socket() on the node pays for the hook:
// socket(AF_INET, SOCK_STREAM, 0) + close() in a netns that is not listed,
// with the program detached and attached (one other netns listed). The VM
// tier's smc-hook scenario runs it and prints the ratio.
func BenchmarkSocketClose(b *testing.B) {
	testenv.RequireRoot(b)
	h := Hook{Dir: "/sys/fs/bpf/rdma-chain-bench"}
	listed := netnstest.NewNS(b)
	var st unix.Stat_t
	if err := unix.Stat(listed.Path(), &st); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		for b.Loop() {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	}
	b.Run("detached", run)
	if err := h.Add(uint32(st.Ino)); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = h.Remove(uint32(st.Ino)) }()
	// The kernel's own accounting of the program's run time (timing under
	// emulation is noisy; this is the program's cost alone).
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	b.Run("attached", func(b *testing.B) {
		before := programStats(b, h)
		run(b)
		after := programStats(b, h)
		if n := after.RunCount - before.RunCount; n > 0 {
			b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(n), "prog-ns/call")
		}
	})
}

func programStats(b *testing.B, h Hook) *ebpf.ProgramStats {
	b.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(h.Dir, linkPin), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		b.Fatal(err)
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	st, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return st
}
