package hook

import (
	"math"
	"os"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
)

// The embedded object is the program the package attaches: an fmod_ret on
// update_socket_protocol and a hash map keyed by a 32-bit netns inode.
func TestEmbeddedObject(t *testing.T) {
	spec, err := loadSmcHook()
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Programs["smc_socket_protocol"]
	if p == nil || p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachModifyReturn || p.AttachTo != "update_socket_protocol" {
		t.Fatalf("program %+v", p)
	}
	m := spec.Maps["smc_netns"]
	if m == nil || m.Type != ebpf.Hash || m.KeySize != 4 || m.ValueSize != 1 {
		t.Fatalf("map %+v", m)
	}
}

// The map key is the netns inode number, which nsfs keeps within 32 bits
// (the kernel's ns_common.inum is an unsigned int).
func TestNetnsInodeFitsKey(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if ino := fi.Sys().(*syscall.Stat_t).Ino; ino == 0 || ino > math.MaxUint32 {
		t.Errorf("netns inode %d does not fit the map's 32-bit key", ino)
	}
}
