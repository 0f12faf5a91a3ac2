// Command crash_plugin is rdma-chain with only its RDMA seam replaced, for
// the netns tier's crash tests on a kernel without RDMA: every netdev, IPAM,
// state and netns operation is the real one, the RDMA subsystem is a small
// file-backed model. Built with -tags failpoint it dies at the failpoints of
// internal/failpoint like the real binary would.
//
// RDMA_CHAIN_FAKE_RDMA names a folder holding config.json
// ({"mode":"shared"|"exclusive","devices":[{"name":…,"netdev":…,"pci":…}]}); a device
// moved into a pod netns is the file moved/<name> holding that netns' inode,
// so a device left in a pod is visible to the tests as a file. The SMC-R
// pnet tables are files likewise (smc.go).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

func init() {
	// Netns switches apply to the OS thread: keep main on one.
	runtime.LockOSThread()
}

func main() {
	env := chain.KernelEnv()
	dir := os.Getenv("RDMA_CHAIN_FAKE_RDMA")
	env.RDMA = fakeRDMA{dir: dir}
	env.SMC = fakeSMC{SMC: env.SMC, dir: dir}
	os.Exit(chain.Main(chain.New(env), "rdma-chain crash-test build (fake RDMA subsystem)"))
}

type fakeConfig struct {
	Mode    rdma.Mode `json:"mode"`
	Devices []struct {
		Name   string `json:"name"`
		Netdev string `json:"netdev"`
		PCI    string `json:"pci"`
	} `json:"devices"`
}

type fakeRDMA struct{ dir string }

func (f fakeRDMA) config() (*fakeConfig, error) {
	if f.dir == "" {
		return nil, rdma.ErrNoRDMA
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "config.json"))
	if err != nil {
		return nil, err
	}
	c := &fakeConfig{}
	return c, json.Unmarshal(b, c)
}

func (f fakeRDMA) NetnsMode() (rdma.Mode, error) {
	c, err := f.config()
	if err != nil {
		return "", err
	}
	return c.Mode, nil
}

// Devices lists the devices visible here: in exclusive mode a moved device
// is not; a netdev is mapped only when it is in the caller's netns.
func (f fakeRDMA) Devices() ([]rdma.Device, error) {
	c, err := f.config()
	if err != nil {
		return nil, err
	}
	var out []rdma.Device
	for _, d := range c.Devices {
		if _, moved, err := f.movedTo(d.Name); err != nil {
			return nil, err
		} else if moved && c.Mode == rdma.ModeExclusive {
			continue
		}
		dev := rdma.Device{Name: d.Name, Driver: "mlx5_core", PCI: d.PCI}
		if _, err := netlink.LinkByName(d.Netdev); err == nil {
			dev.Netdev = d.Netdev
		}
		out = append(out, dev)
	}
	return out, nil
}

func (f fakeRDMA) CheckMovable(rdma.Device) error { return nil }

// FreeGIDs answers a table of size 0, which ADD does not check: the fake
// devices have no GID table.
func (f fakeRDMA) FreeGIDs(dev string, port, want int) (free, size int, err error) { return 0, 0, nil }

func (f fakeRDMA) movedPath(dev string) string { return filepath.Join(f.dir, "moved", dev) }

// movedTo returns the inode of the netns dev was moved to.
func (f fakeRDMA) movedTo(dev string) (uint64, bool, error) {
	b, err := os.ReadFile(f.movedPath(dev))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	ino, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return ino, true, err
}

func (f fakeRDMA) MoveToNetns(dev string, nsFd int) error {
	if _, moved, err := f.movedTo(dev); err != nil {
		return fmt.Errorf("move RDMA device %s: %w", dev, err)
	} else if moved {
		return fmt.Errorf("move RDMA device %s: already moved", dev)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nsFd, &st); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.movedPath(dev)), 0o700); err != nil {
		return err
	}
	return os.WriteFile(f.movedPath(dev), []byte(strconv.FormatUint(st.Ino, 10)), 0o600)
}

// ReturnToHost takes an absent device or netns for no error, as the kernel's does.
func (f fakeRDMA) ReturnToHost(dev, podNSPath string) error {
	err := os.Remove(f.movedPath(dev))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (f fakeRDMA) InNetns(dev, nsPath string) (bool, error) {
	ino, moved, err := f.movedTo(dev)
	if err != nil || !moved {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return false, err
	}
	return st.Ino == ino, nil
}
