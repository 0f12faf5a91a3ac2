package hookmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The pins in the hook's bpffs directory and the map's shape, which
// pkg/smc/hook's tests hold to the embedded object.
const (
	MapPin    = "smc_netns"
	LinkPin   = "smc_link"
	MapName   = "smc_netns" // the kernel's name of the map (BPF_OBJ_NAME_LEN 16)
	MapType   = unix.BPF_MAP_TYPE_HASH
	KeySize   = 4 // the netns inode number, a u32 (ns_common.inum)
	ValueSize = 1
	// HoldKey, listed, keeps the program attached with no pod listed: the
	// reconcile daemon holds it so that no pod's ADD pays loading it. No
	// netns has inode 0 (the kernel numbers them from 0xF0000000, and the
	// initial netns is 0xEFFFFFF9), so the program never matches it.
	HoldKey uint32 = 0
)

// Status is what the pins say: the program attached, held, and the pod
// netns listed (HoldKey not among them).
type Status struct {
	Attached bool
	Held     bool
	Listed   []uint32
}

var (
	// ErrNotPinned wraps os.ErrNotExist: the directory or the map pin is
	// absent on a bpffs (the hook is not loaded on this node).
	ErrNotPinned error = notPinned{}
	// ErrNoBPFFS means the pin directory (or, before it exists, its parent) is
	// not on a bpffs, where a missing pin says nothing of the kernel's hook.
	ErrNoBPFFS = errors.New("no bpffs mounted")
	// ErrNotHookMap means the pin is not the hook's map; it is left alone.
	ErrNotHookMap = errors.New("not the SMC socket hook's netns map")
)

// notPinned is ErrNotPinned's type: a value made without fmt at start-up
// (the plugin starts for every pod).
type notPinned struct{}

func (notPinned) Error() string { return "the SMC socket hook's netns map is not pinned" }
func (notPinned) Unwrap() error { return os.ErrNotExist }

// Map is the hook's pinned netns map, open.
type Map struct {
	dir   string
	dirFD int // the pin directory, O_PATH
	fd    int // the map
}

// Open opens the map pinned in dir. It returns an error wrapping
// ErrNotPinned when dir or its map pin does not exist on a bpffs, one
// wrapping ErrNoBPFFS when dir (or its parent, before dir exists) is on
// another file system, and one wrapping ErrNotHookMap for a pin that is a
// symbolic link or not the hook's map.
func Open(dir string) (*Map, error) {
	dirFD, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		if err := onBPFFS(filepath.Dir(dir), -1); err != nil {
			return nil, err
		}
		return nil, ErrNotPinned
	}
	if err != nil {
		return nil, fmt.Errorf("open bpffs directory %s: %w", dir, err)
	}
	m := &Map{dir: dir, dirFD: dirFD, fd: -1}
	if err := m.open(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Map) open() error {
	if err := onBPFFS(m.dir, m.dirFD); err != nil {
		return err
	}
	if ok, err := m.pinned(MapPin); err != nil || !ok {
		if err == nil {
			err = ErrNotPinned
		}
		return err
	}
	name, err := unix.BytePtrFromString(MapPin)
	if err != nil {
		return err
	}
	attr := objAttr{pathname: unsafe.Pointer(name), fileFlags: unix.BPF_F_PATH_FD, pathFD: int32(m.dirFD)}
	fd, err := bpf(unix.BPF_OBJ_GET, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		return fmt.Errorf("open the pinned map %s/%s: %w", m.dir, MapPin, err)
	}
	m.fd = int(fd)
	// A pinned program or link opens too, and its info reads otherwise.
	kind, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", m.fd))
	if err != nil {
		return fmt.Errorf("read the kind of the pinned object %s/%s: %w", m.dir, MapPin, err)
	}
	if kind != "anon_inode:bpf-map" {
		return fmt.Errorf("%w: %s/%s is %q, not a map", ErrNotHookMap, m.dir, MapPin, kind)
	}
	var info mapInfo
	iattr := infoAttr{bpfFD: uint32(m.fd), infoLen: uint32(unsafe.Sizeof(info)), info: unsafe.Pointer(&info)}
	if _, err := bpf(unix.BPF_OBJ_GET_INFO_BY_FD, unsafe.Pointer(&iattr), unsafe.Sizeof(iattr)); err != nil {
		return fmt.Errorf("read the pinned map %s/%s: %w", m.dir, MapPin, err)
	}
	return info.check(m.dir)
}

// check refuses a map of another type or shape, or one the kernel names
// otherwise (a kernel that keeps no map names reports an empty name).
func (i *mapInfo) check(dir string) error {
	name := unix.ByteSliceToString(i.name[:])
	if i.typ != MapType || i.keySize != KeySize || i.valueSize != ValueSize || (name != "" && name != MapName) {
		return fmt.Errorf("%w: %s/%s is map %q of type %d with %d-byte keys and %d-byte values", ErrNotHookMap,
			dir, MapPin, name, i.typ, i.keySize, i.valueSize)
	}
	return nil
}

// Close releases the map and the directory.
func (m *Map) Close() {
	if m.fd >= 0 {
		_ = unix.Close(m.fd)
	}
	_ = unix.Close(m.dirFD)
}

// Linked reports whether the hook's link (the attached program) is pinned
// beside the map.
func (m *Map) Linked() (bool, error) { return m.pinned(LinkPin) }

// pinned reports whether name is pinned in the directory: a regular file
// there, never a symbolic link followed.
func (m *Map) pinned(name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(m.dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s/%s: %w", m.dir, name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%w: %s/%s is not a pinned object (mode %#o)", ErrNotHookMap, m.dir, name, st.Mode)
	}
	return true, nil
}

// OnBPFFS fails, wrapping ErrNoBPFFS (and the errno when path cannot be
// read), unless path is on a bpffs.
func OnBPFFS(path string) error { return onBPFFS(path, -1) }

// onBPFFS fails, wrapping ErrNoBPFFS, unless the file system of fd (or of
// path, with fd < 0) is a bpffs.
func onBPFFS(path string, fd int) error {
	var fs unix.Statfs_t
	var err error
	if fd >= 0 {
		err = unix.Fstatfs(fd, &fs)
	} else {
		err = unix.Statfs(path, &fs)
	}
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrNoBPFFS, path, err)
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w at %s (file system magic %#x): the SMC socket hook's pins cannot be read", ErrNoBPFFS, path, fs.Type)
	}
	return nil
}

// Put lists the netns with inode number ino.
func (m *Map) Put(ino uint32) error {
	v := uint8(1)
	attr := elemAttr{mapFD: uint32(m.fd), key: unsafe.Pointer(&ino), value: unsafe.Pointer(&v), flags: unix.BPF_ANY}
	if _, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err != nil {
		return fmt.Errorf("list netns %d in the SMC socket hook: %w", ino, err)
	}
	return nil
}

// Delete unlists ino and reports whether it was listed: the kernel's
// ENOENT for a hash map's absent key (a real-kernel test holds it).
func (m *Map) Delete(ino uint32) (bool, error) {
	attr := elemAttr{mapFD: uint32(m.fd), key: unsafe.Pointer(&ino)}
	_, err := bpf(unix.BPF_MAP_DELETE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unlist netns %d from the SMC socket hook: %w", ino, err)
	}
	return true, nil
}

// Lookup reports whether ino is listed.
func (m *Map) Lookup(ino uint32) (bool, error) {
	var v uint8
	attr := elemAttr{mapFD: uint32(m.fd), key: unsafe.Pointer(&ino), value: unsafe.Pointer(&v)}
	_, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up netns %d in the SMC socket hook: %w", ino, err)
	}
	return true, nil
}

// Empty reports whether no netns is listed: the first key of an empty
// hash map is ENOENT (a real-kernel test holds it).
func (m *Map) Empty() (bool, error) {
	var next uint32
	attr := elemAttr{mapFD: uint32(m.fd), value: unsafe.Pointer(&next)} // a nil key asks for the first
	_, err := bpf(unix.BPF_MAP_GET_NEXT_KEY, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if errors.Is(err, unix.ENOENT) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the SMC socket hook's netns list: %w", err)
	}
	return false, nil
}
