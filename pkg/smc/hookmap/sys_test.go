package hookmap

import (
	"testing"
	"unsafe"
)

// TestKernelLayouts checks that the attributes' layouts are union
// bpf_attr's and struct bpf_map_info's (include/uapi/linux/bpf.h) on the
// 64-bit platforms the project builds.
func TestKernelLayouts(t *testing.T) {
	var o objAttr
	var e elemAttr
	var i infoAttr
	var m mapInfo
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"BPF_OBJ_GET pathname", unsafe.Offsetof(o.pathname), 0},
		{"BPF_OBJ_GET bpf_fd", unsafe.Offsetof(o.bpfFD), 8},
		{"BPF_OBJ_GET file_flags", unsafe.Offsetof(o.fileFlags), 12},
		{"BPF_OBJ_GET path_fd", unsafe.Offsetof(o.pathFD), 16},
		{"map_fd", unsafe.Offsetof(e.mapFD), 0},
		{"key", unsafe.Offsetof(e.key), 8},
		{"value/next_key", unsafe.Offsetof(e.value), 16},
		{"flags", unsafe.Offsetof(e.flags), 24},
		{"info.bpf_fd", unsafe.Offsetof(i.bpfFD), 0},
		{"info.info_len", unsafe.Offsetof(i.infoLen), 4},
		{"info.info", unsafe.Offsetof(i.info), 8},
		{"bpf_map_info.type", unsafe.Offsetof(m.typ), 0},
		{"bpf_map_info.key_size", unsafe.Offsetof(m.keySize), 8},
		{"bpf_map_info.value_size", unsafe.Offsetof(m.valueSize), 12},
		{"bpf_map_info.name", unsafe.Offsetof(m.name), 24},
		{"sizeof bpf_map_info head", unsafe.Sizeof(m), 40},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, want %d", c.what, c.got, c.want)
		}
	}
}
