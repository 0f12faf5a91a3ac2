package hookcmd

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// node is a fresh bpffs with the pin directory dir and a stand-in hook
// binary that records its arguments in execs.
type node struct {
	dir string
	log string
	c   Client
}

func newNode(t *testing.T) *node {
	t.Helper()
	testenv.Privileged(t)
	fs := t.TempDir()
	if err := unix.Mount("bpf", fs, "bpf", 0, "mode=0700"); err != nil {
		testenv.Unavailable(t, "cannot mount a bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(fs, unix.MNT_DETACH) })
	n := &node{dir: filepath.Join(fs, "rdma-chain"), log: filepath.Join(t.TempDir(), "execs")}
	n.c = Client{Runner: Runner{Path: script(t, `echo "$@" >>`+n.log)}}
	return n
}

// pin pins the hook's map (and link, as a stand-in pinned object).
func (n *node) pin(t *testing.T, link bool, spec ebpf.MapSpec) *ebpf.Map {
	t.Helper()
	if err := os.Mkdir(n.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&spec)
	if err != nil {
		testenv.Unavailable(t, "cannot create a BPF map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Pin(filepath.Join(n.dir, hookmap.MapPin)); err != nil {
		t.Fatal(err)
	}
	if link {
		l, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := l.Pin(filepath.Join(n.dir, hookmap.LinkPin)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// execs returns and forgets the hook binary's runs so far.
func (n *node) execs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(n.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(n.log)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

var hookSpec = ebpf.MapSpec{Name: hookmap.MapName, Type: ebpf.Hash, KeySize: hookmap.KeySize,
	ValueSize: hookmap.ValueSize, MaxEntries: 16}

// TestClientWithoutPins checks that with nothing pinned the hook binary
// loads the program (Add) and probes the kernel (Supported); nothing
// pinned is nothing listed or to remove.
func TestClientWithoutPins(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t)
	if err := n.c.Supported(n.dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := n.c.Add(n.dir, 4026531840)
	if err != nil || !loaded {
		t.Fatalf("Add = %v, %v; want loaded by the binary", loaded, err)
	}
	if got, want := n.execs(t), []string{"supported " + n.dir, "add " + n.dir + " 4026531840"}; !reflect.DeepEqual(got, want) {
		t.Errorf("execs %q, want %q", got, want)
	}
	if l, err := n.c.Listed(n.dir, 4026531840); err != nil || l {
		t.Errorf("Listed = %v, %v; want false", l, err)
	}
	if err := n.c.Remove(n.dir, 4026531840); err != nil {
		t.Errorf("Remove = %v", err)
	}
	if got := n.execs(t); got != nil {
		t.Errorf("execs %q, want none", got)
	}
}

// TestClientWithPins checks that with the map and link pinned, the
// pods' listings are the plugin's own bpf(2) calls; only the last
// Remove runs the binary, to detach.
func TestClientWithPins(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t)
	m := n.pin(t, true, hookSpec)
	err := n.c.Supported(n.dir)
	// Without IPPROTO_SMC in this kernel the pins prove nothing: the
	// binary probes.
	var wantExecs []string
	if fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, ipprotoSMC); serr == nil {
		unix.Close(fd)
	} else {
		wantExecs = []string{"supported " + n.dir}
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, ino := range []uint64{4026531840, 4026532001} {
		if loaded, err := n.c.Add(n.dir, ino); err != nil || loaded {
			t.Fatalf("Add(%d) = %v, %v; want listed in the pinned map", ino, loaded, err)
		}
	}
	var v uint8
	if err := m.Lookup(uint32(4026532001), &v); err != nil || v != 1 {
		t.Errorf("pinned map: %d, %v; want 1", v, err)
	}
	if l, err := n.c.Listed(n.dir, 4026532001); err != nil || !l {
		t.Errorf("Listed = %v, %v; want true", l, err)
	}
	if l, err := n.c.Listed(n.dir, 4026539999); err != nil || l {
		t.Errorf("Listed of another netns = %v, %v; want false", l, err)
	}
	if err := n.c.Remove(n.dir, 4026531840); err != nil {
		t.Fatal(err)
	}
	if err := n.c.Remove(n.dir, 4026531840); err != nil { // not listed any more
		t.Fatal(err)
	}
	if got := n.execs(t); !reflect.DeepEqual(got, wantExecs) {
		t.Fatalf("execs %q, want %q", got, wantExecs)
	}
	if err := n.c.Remove(n.dir, 4026532001); err != nil {
		t.Fatal(err)
	}
	if got, want := n.execs(t), []string{"remove " + n.dir + " 4026532001"}; !reflect.DeepEqual(got, want) {
		t.Errorf("execs after the last Remove %q, want %q", got, want)
	}
}

// TestClientRefuses checks that a pinned map without its link (the
// program not attached) lists nothing as attached, and a pin that is not
// the hook's map is refused, never updated, and the binary never runs
// for it.
func TestClientRefuses(t *testing.T) {
	testenv.Privileged(t)
	t.Run("map without link", func(t *testing.T) {
		n := newNode(t)
		m := n.pin(t, false, hookSpec)
		if err := m.Put(uint32(4026531840), uint8(1)); err != nil {
			t.Fatal(err)
		}
		if l, err := n.c.Listed(n.dir, 4026531840); err != nil || l {
			t.Errorf("Listed = %v, %v; want false", l, err)
		}
	})
	t.Run("not the hook's map", func(t *testing.T) {
		n := newNode(t)
		spec := hookSpec
		spec.ValueSize = 8
		m := n.pin(t, true, spec)
		if _, err := n.c.Add(n.dir, 4026531840); !errors.Is(err, hookmap.ErrNotHookMap) {
			t.Errorf("Add = %v, want ErrNotHookMap", err)
		}
		if err := n.c.Remove(n.dir, 4026531840); !errors.Is(err, hookmap.ErrNotHookMap) {
			t.Errorf("Remove = %v, want ErrNotHookMap", err)
		}
		var k uint64
		if err := m.NextKey(nil, &k); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("the foreign map was changed: %v", err)
		}
		if got := n.execs(t); got != nil {
			t.Errorf("execs %q, want none", got)
		}
	})
	t.Run("inode beyond 32 bits", func(t *testing.T) {
		n := newNode(t)
		n.pin(t, true, hookSpec)
		for _, ino := range []uint64{0, 1 << 32} {
			if _, err := n.c.Add(n.dir, ino); err == nil {
				t.Errorf("Add(%d) succeeded", ino)
			}
			if err := n.c.Remove(n.dir, ino); err == nil {
				t.Errorf("Remove(%d) succeeded", ino)
			}
		}
		if got := n.execs(t); got != nil {
			t.Errorf("execs %q, want none", got)
		}
	})
}
