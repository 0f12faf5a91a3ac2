package hookmap

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parts of union bpf_attr (include/uapi/linux/bpf.h) the package uses.
// Pointers are unsafe.Pointer, 64 bits on the 64-bit platforms the project
// builds for (linux/amd64, linux/arm64), where the kernel has __aligned_u64;
// the garbage collector then keeps what they point to.

// objAttr is BPF_OBJ_GET's: pathname relative to pathFD with BPF_F_PATH_FD
// (Linux >= 6.5; the hook needs >= 6.11).
type objAttr struct {
	pathname  unsafe.Pointer
	bpfFD     uint32
	fileFlags uint32
	pathFD    int32
}

// elemAttr is BPF_MAP_*_ELEM's and BPF_MAP_GET_NEXT_KEY's (value is then
// next_key).
type elemAttr struct {
	mapFD uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

// infoAttr is BPF_OBJ_GET_INFO_BY_FD's.
type infoAttr struct {
	bpfFD   uint32
	infoLen uint32
	info    unsafe.Pointer
}

// mapInfo is the head of struct bpf_map_info: the kernel fills at most
// infoLen bytes.
type mapInfo struct {
	typ        uint32
	id         uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
	name       [unix.BPF_OBJ_NAME_LEN]byte
}

// bpf is bpf(2); it returns the new file descriptor of the commands that
// make one.
func bpf(cmd int, attr unsafe.Pointer, size uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}
