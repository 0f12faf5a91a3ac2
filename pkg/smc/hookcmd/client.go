package hookcmd

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// Client is the plugin's way to the node's socket hook. Once the program
// is pinned, listing, unlisting and looking up a netns are one bpf(2) call
// each on the pinned map (pkg/smc/hookmap), and the pins prove the kernel
// can run the hook; the hook binary runs only to probe a node with nothing
// pinned, to load and attach the program, and to detach it with the last
// netns.
type Client struct{ Runner Runner }

// Supported tells whether the kernel can run the hook with pins under dir:
// the program attached and pinned there and IPPROTO_SMC working, or else
// the hook binary's probe.
func (c Client) Supported(dir string) error {
	if attached(dir) == nil {
		return nil
	}
	return c.Runner.Supported(dir)
}

func attached(dir string) error {
	m, err := hookmap.Open(dir)
	if err != nil {
		return err
	}
	defer m.Close()
	if linked, err := m.Linked(); err != nil || !linked {
		return fmt.Errorf("no pinned link in %s: %w", dir, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, ipprotoSMC)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// ipprotoSMC is IPPROTO_SMC (Linux >= 6.11).
const ipprotoSMC = 256

// Add lists the netns with inode ino in the pinned map; with nothing
// pinned, the hook binary loads, attaches and pins the program and lists
// it (loaded is then true).
func (c Client) Add(dir string, ino uint64) (loaded bool, err error) {
	key, err := mapKey(ino)
	if err != nil {
		return false, err
	}
	m, err := hookmap.Open(dir)
	if errors.Is(err, hookmap.ErrNotPinned) {
		return true, c.Runner.Add(dir, ino)
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	return false, m.Put(key)
}

// Remove unlists ino; when no netns is left listed the hook binary
// detaches the program and removes the pins. Nothing pinned (on a bpffs)
// is nothing to remove.
func (c Client) Remove(dir string, ino uint64) error {
	key, err := mapKey(ino)
	if err != nil {
		return err
	}
	m, err := hookmap.Open(dir)
	if errors.Is(err, hookmap.ErrNotPinned) {
		return nil
	}
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Delete(key); err != nil {
		return err
	}
	if empty, err := m.Empty(); err != nil || !empty {
		return err
	}
	return c.Runner.Remove(dir, ino)
}

// Held reports whether the program is attached and held (hookmap.HoldKey
// listed), with the raw map client: the reconcile daemon's look before
// each pass, which runs the hook binary only when the hold is missing.
func (c Client) Held(dir string) (bool, error) { return linkedLookup(dir, hookmap.HoldKey) }

// Listed reports whether ino is listed and the program attached.
func (c Client) Listed(dir string, ino uint64) (bool, error) {
	key, err := mapKey(ino)
	if err != nil {
		return false, err
	}
	return linkedLookup(dir, key)
}

// linkedLookup reports whether key is in the pinned map and the program
// attached; nothing pinned is false.
func linkedLookup(dir string, key uint32) (bool, error) {
	m, err := hookmap.Open(dir)
	if errors.Is(err, hookmap.ErrNotPinned) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	if linked, err := m.Linked(); err != nil || !linked {
		return false, err
	}
	return m.Lookup(key)
}

// mapKey is ino as the map's key: the kernel's netns inode numbers are 32
// bits (ns_common.inum); a record's larger number is not one.
func mapKey(ino uint64) (uint32, error) {
	if ino == 0 || ino > math.MaxUint32 {
		return 0, fmt.Errorf("%d is not a netns inode number", ino)
	}
	return uint32(ino), nil
}
