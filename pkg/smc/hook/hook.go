package hook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -go-package hook smcHook bpf/smc_hook.c -- -I/usr/include/x86_64-linux-gnu

// DefaultDir is where the pins live unless configured otherwise.
const DefaultDir = "/sys/fs/bpf/rdma-chain"

// The pins, which the plugin's map client (pkg/smc/hookmap) opens without
// this package.
const (
	mapPin  = hookmap.MapPin
	linkPin = hookmap.LinkPin
)

// Hook is the pinned program of one node.
type Hook struct {
	Dir string // bpffs directory of the pins; "" means DefaultDir
}

func (h Hook) dir() string {
	if h.Dir == "" {
		return DefaultDir
	}
	return h.Dir
}

// Add lists the netns with inode number ino, loading, attaching and pinning
// the program first when no pinned link exists.
func (h Hook) Add(ino uint32) error {
	if err := h.put(ino); err != nil {
		return fmt.Errorf("list netns %d in the SMC socket hook: %w", ino, err)
	}
	return nil
}

// Hold attaches the program, as Add does, and keeps it attached with no
// netns listed, until Release: hookmap.HoldKey stays in the map.
func (h Hook) Hold() error {
	if err := h.put(hookmap.HoldKey); err != nil {
		return fmt.Errorf("hold the SMC socket hook: %w", err)
	}
	return nil
}

// Release undoes Hold; with no netns listed it detaches the program and
// removes the pins. Nothing pinned on a bpffs is nothing to release.
func (h Hook) Release() error { return h.Remove(hookmap.HoldKey) }

func (h Hook) put(key uint32) error {
	if err := h.onBPFFS(); err != nil {
		return err
	}
	m, err := h.openMap()
	if errors.Is(err, os.ErrNotExist) {
		m, err = h.attach()
	}
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Put(key, uint8(1))
}

// Remove unlists ino; with the last netns gone it detaches the program and
// removes the pins. Nothing pinned on a bpffs is nothing to remove; a pin
// directory that is not on a bpffs is an error, never "nothing pinned".
func (h Hook) Remove(ino uint32) error {
	if err := h.onBPFFS(); err != nil {
		return err
	}
	m, err := h.openMap()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Delete(ino); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unlist netns %d from the SMC socket hook: %w", ino, err)
	}
	var key uint32
	if err := m.NextKey(nil, &key); err == nil {
		return nil // other pods still listed
	} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read the SMC socket hook's netns list: %w", err)
	}
	return h.detach(m)
}

// Listed reports whether ino is listed and the program attached.
func (h Hook) Listed(ino uint32) (bool, error) {
	if err := h.onBPFFS(); err != nil {
		return false, err
	}
	if _, err := os.Lstat(filepath.Join(h.dir(), linkPin)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	m, err := h.openMap()
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	var v uint8
	err = m.Lookup(ino, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	return err == nil, err
}

// State returns what the pins say: the program attached, held, and the
// listed netns.
func (h Hook) State() (hookmap.Status, error) {
	var st hookmap.Status
	if err := h.onBPFFS(); err != nil {
		return st, err
	}
	if _, err := os.Lstat(filepath.Join(h.dir(), linkPin)); err == nil {
		st.Attached = true
	}
	m, err := h.openMap()
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	defer m.Close()
	var k uint32
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k == hookmap.HoldKey {
			st.Held = true
			continue
		}
		st.Listed = append(st.Listed, k)
	}
	return st, it.Err()
}

// onBPFFS fails, wrapping ErrNoBPFFS, unless the pin directory (or, before
// the first pin, its parent) is on a bpffs. Elsewhere (a container without
// the host's /sys/fs/bpf, a bpffs unmounted) a missing pin says nothing of
// the kernel's hook, which may still list netns whose inodes the kernel
// gives to new pods.
func (h Hook) onBPFFS() error {
	err := hookmap.OnBPFFS(h.dir())
	if errors.Is(err, unix.ENOENT) {
		err = hookmap.OnBPFFS(filepath.Dir(h.dir()))
	}
	return err
}

func (h Hook) openMap() (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(h.dir(), mapPin), nil)
	if err != nil {
		return nil, fmt.Errorf("open the SMC socket hook's pinned netns map: %w", err)
	}
	return m, nil
}

// attach loads the program, attaches it to update_socket_protocol and pins
// the link and the map; on failure nothing stays pinned or attached.
func (h Hook) attach() (m *ebpf.Map, err error) {
	if err := ensureDir(h.dir()); err != nil {
		return nil, err
	}
	var objs smcHookObjects
	defer func() {
		if err != nil {
			h.unpin() // also the directory just created
		}
	}()
	if err := loadSmcHookObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the SMC socket hook: %w", err)
	}
	defer objs.SmcSocketProtocol.Close()
	defer func() {
		if err != nil {
			objs.SmcNetns.Close()
		}
	}()
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.SmcSocketProtocol, AttachType: ebpf.AttachModifyReturn})
	if err != nil {
		return nil, fmt.Errorf("attach the SMC socket hook to update_socket_protocol: %w", err)
	}
	defer l.Close()
	if err := objs.SmcNetns.Pin(filepath.Join(h.dir(), mapPin)); err != nil {
		return nil, fmt.Errorf("pin the SMC socket hook's map: %w", err)
	}
	if err := l.Pin(filepath.Join(h.dir(), linkPin)); err != nil {
		return nil, fmt.Errorf("pin the SMC socket hook's link: %w", err)
	}
	return objs.SmcNetns, nil
}

// detach unpins the link (the program detaches with its last reference)
// and the map, and removes the pin directory.
func (h Hook) detach(m *ebpf.Map) error {
	l, err := link.LoadPinnedLink(filepath.Join(h.dir(), linkPin), nil)
	if err == nil {
		err = l.Unpin()
		l.Close()
	} else if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("detach the SMC socket hook: %w", err)
	}
	if err := m.Unpin(); err != nil {
		return fmt.Errorf("unpin the SMC socket hook's map: %w", err)
	}
	if err := os.Remove(h.dir()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", h.dir(), err)
	}
	return nil
}

func (h Hook) unpin() {
	for _, p := range []string{linkPin, mapPin} {
		_ = os.Remove(filepath.Join(h.dir(), p))
	}
	_ = os.Remove(h.dir())
}

// ensureDir creates the pin directory 0700 on a bpffs, refusing a symlink.
func ensureDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create bpffs directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("bpffs path %s is not a directory (symlink?)", dir)
	}
	return nil
}
