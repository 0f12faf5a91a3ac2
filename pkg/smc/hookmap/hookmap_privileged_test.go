// The map client against the running kernel: a fresh bpffs instance per
// case, maps made and pinned with cilium/ebpf (the hook's own loader),
// then opened, refused and changed through raw bpf(2). The host needs no
// SMC: a hash map and pins are all the client touches.

package hookmap

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// bpffs mounts a fresh bpffs instance and returns its path.
func bpffs(t *testing.T) string {
	t.Helper()
	testenv.Privileged(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		testenv.Unavailable(t, "cannot mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// pinMap pins a new map of spec at path.
func pinMap(t *testing.T, spec ebpf.MapSpec, path string) {
	t.Helper()
	if spec.MaxEntries == 0 {
		spec.MaxEntries = 16
	}
	m, err := ebpf.NewMap(&spec)
	if err != nil {
		testenv.Unavailable(t, "cannot create a BPF map: %v", err)
	}
	defer m.Close()
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}
}

var hookSpec = ebpf.MapSpec{Name: MapName, Type: ebpf.Hash, KeySize: KeySize, ValueSize: ValueSize}

func TestOpen(t *testing.T) {
	testenv.Privileged(t)
	with := func(f func(*ebpf.MapSpec)) ebpf.MapSpec { s := hookSpec; f(&s); return s }
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, fs, dir string) // dir is fs/rdma-chain
		want    error                              // nil: opens
	}{
		{"no directory", func(*testing.T, string, string) {}, ErrNotPinned},
		{"no pin", mkdir, ErrNotPinned},
		{"hook map", hookMap, nil},
		{"unnamed hook map", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			pinMap(t, with(func(s *ebpf.MapSpec) { s.Name = "" }), filepath.Join(dir, MapPin))
		}, nil},
		{"other name", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			pinMap(t, with(func(s *ebpf.MapSpec) { s.Name = "other" }), filepath.Join(dir, MapPin))
		}, ErrNotHookMap},
		{"8-byte key", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			pinMap(t, with(func(s *ebpf.MapSpec) { s.KeySize = 8 }), filepath.Join(dir, MapPin))
		}, ErrNotHookMap},
		{"4-byte value", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			pinMap(t, with(func(s *ebpf.MapSpec) { s.ValueSize = 4 }), filepath.Join(dir, MapPin))
		}, ErrNotHookMap},
		{"LRU hash", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			pinMap(t, with(func(s *ebpf.MapSpec) { s.Type = ebpf.LRUHash }), filepath.Join(dir, MapPin))
		}, ErrNotHookMap},
		{"a program pinned as the map", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
				Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()}})
			if err != nil {
				testenv.Unavailable(t, "cannot load a socket filter: %v", err)
			}
			defer p.Close()
			if err := p.Pin(filepath.Join(dir, MapPin)); err != nil {
				t.Fatal(err)
			}
		}, ErrNotHookMap},
		{"map pin a symlink to the hook map", func(t *testing.T, fs, dir string) {
			mkdir(t, "", dir)
			pinMap(t, hookSpec, filepath.Join(fs, "elsewhere"))
			symlink(t, filepath.Join(fs, "elsewhere"), filepath.Join(dir, MapPin))
		}, ErrNotHookMap},
		{"directory a symlink to the hook's", func(t *testing.T, fs, dir string) {
			hookMap(t, fs, filepath.Join(fs, "real"))
			symlink(t, filepath.Join(fs, "real"), dir)
		}, unix.ELOOP},
		{"directory on tmpfs", func(t *testing.T, _, dir string) {
			mkdir(t, "", dir)
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		}, ErrNoBPFFS},
		{"no directory, parent on tmpfs", func(t *testing.T, fs, _ string) {
			if err := unix.Mount("tmpfs", fs, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(fs, unix.MNT_DETACH) })
		}, ErrNoBPFFS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := bpffs(t)
			dir := filepath.Join(fs, "rdma-chain")
			tc.prepare(t, fs, dir)
			m, err := Open(dir)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("Open succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if errors.Is(tc.want, ErrNotPinned) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%v does not wrap os.ErrNotExist", err)
			}
		})
	}
}

// TestListUnlist checks the kernel's answers the client reads as facts:
// ENOENT for a hash map's absent key on lookup and delete, and for the
// first key of an empty map.
func TestListUnlist(t *testing.T) {
	testenv.Privileged(t)
	fs := bpffs(t)
	dir := filepath.Join(fs, "rdma-chain")
	hookMap(t, fs, dir)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	expect := func(what string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s = %v, %v; want %v", what, got, err, want)
		}
	}
	empty, err := m.Empty()
	expect("Empty of a new map", empty, err, true)
	listed, err := m.Lookup(4026531840)
	expect("Lookup of an absent key", listed, err, false)
	was, err := m.Delete(4026531840)
	expect("Delete of an absent key", was, err, false)
	for _, ino := range []uint32{4026531840, 4026532999} {
		if err := m.Put(ino); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Put(4026531840); err != nil { // listing twice changes nothing
		t.Fatal(err)
	}
	listed, err = m.Lookup(4026532999)
	expect("Lookup of a listed key", listed, err, true)
	was, err = m.Delete(4026531840)
	expect("Delete of a listed key", was, err, true)
	empty, err = m.Empty()
	expect("Empty with one key", empty, err, false)
	listed, err = m.Lookup(4026531840)
	expect("Lookup of a deleted key", listed, err, false)
	was, err = m.Delete(4026532999)
	expect("Delete of the last key", was, err, true)
	empty, err = m.Empty()
	expect("Empty after the last delete", empty, err, true)

	// What a second opener (the hook binary, another plugin call) sees.
	other, err := ebpf.LoadPinnedMap(filepath.Join(dir, MapPin), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := m.Put(7); err != nil {
		t.Fatal(err)
	}
	var v uint8
	if err := other.Lookup(uint32(7), &v); err != nil || v != 1 {
		t.Fatalf("the pinned map holds %d, %v for a listed netns; want 1", v, err)
	}
}

func TestLinked(t *testing.T) {
	testenv.Privileged(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, fs, dir string)
		want    bool
		wantErr error
	}{
		{"map alone", func(*testing.T, string, string) {}, false, nil},
		{"link pinned", func(t *testing.T, _, dir string) {
			pinMap(t, ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}, filepath.Join(dir, LinkPin))
		}, true, nil},
		{"link pin a symlink", func(t *testing.T, fs, dir string) {
			pinMap(t, ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}, filepath.Join(fs, "l"))
			symlink(t, filepath.Join(fs, "l"), filepath.Join(dir, LinkPin))
		}, false, ErrNotHookMap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := bpffs(t)
			dir := filepath.Join(fs, "rdma-chain")
			hookMap(t, fs, dir)
			tc.prepare(t, fs, dir)
			m, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got, err := m.Linked()
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("Linked = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func mkdir(t *testing.T, _, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func hookMap(t *testing.T, fs, dir string) {
	t.Helper()
	mkdir(t, fs, dir)
	pinMap(t, hookSpec, filepath.Join(dir, MapPin))
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
