package hook

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// TestEmbeddedObject checks that the embedded object is the program the
// package attaches: an fmod_ret on update_socket_protocol and a hash map
// keyed by a 32-bit netns inode.
func TestEmbeddedObject(t *testing.T) {
	spec, err := loadSmcHook()
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Programs["smc_socket_protocol"]
	if p == nil || p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachModifyReturn || p.AttachTo != "update_socket_protocol" {
		t.Fatalf("program %+v", p)
	}
	// What the plugin's map client (pkg/smc/hookmap) accepts as the hook's.
	m := spec.Maps[hookmap.MapName]
	if m == nil || m.Name != hookmap.MapName || m.Type != ebpf.Hash || uint32(m.Type) != hookmap.MapType ||
		m.KeySize != hookmap.KeySize || m.ValueSize != hookmap.ValueSize {
		t.Fatalf("map %+v", m)
	}
}

// TestNetnsInodeFitsKey checks that the map key is the netns inode
// number, which nsfs keeps within 32 bits (the kernel's ns_common.inum
// is an unsigned int).
func TestNetnsInodeFitsKey(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if ino := fi.Sys().(*syscall.Stat_t).Ino; ino == 0 || ino > math.MaxUint32 {
		t.Errorf("netns inode %d does not fit the map's 32-bit key", ino)
	}
}

// TestRefusesWhatIsNotABPFFS checks that every hook operation refuses a
// pin directory that is not on a bpffs (a plain directory, a tmpfs, the
// parent of one not yet created) instead of reading the missing pins as
// "nothing listed, nothing to remove".
func TestRefusesWhatIsNotABPFFS(t *testing.T) {
	dirs := map[string]string{"existing": t.TempDir(), "not yet created": filepath.Join(t.TempDir(), "rdma-chain")}
	if fs, err := tmpfsDir(t); err == nil {
		dirs["tmpfs"] = fs
	} else {
		t.Logf("no tmpfs to mount (%v): plain directories only", err)
	}
	for name, dir := range dirs {
		h := Hook{Dir: dir}
		ops := map[string]error{"add": h.Add(7), "remove": h.Remove(7)}
		_, ops["listed"] = h.Listed(7)
		_, ops["state"] = h.State()
		ops["hold"], ops["release"] = h.Hold(), h.Release()
		for op, err := range ops {
			if !errors.Is(err, ErrNoBPFFS) {
				t.Errorf("%s: %s on %s = %v, want %v", name, op, dir, err, ErrNoBPFFS)
			}
		}
		if entries, _ := os.ReadDir(filepath.Dir(dir)); name == "not yet created" && len(entries) != 0 {
			t.Errorf("%s: created %v", name, entries)
		}
	}
}

// tmpfsDir mounts a tmpfs on a new directory (root only).
func tmpfsDir(t *testing.T) (string, error) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir, nil
}
