// Package devinfo writes and removes the CNI Plugin Device Information File
// of the NPWG device-info specification (v1.1.0,
// github.com/k8snetworkplumbingwg/device-info-spec): the path arrives in
// runtimeConfig.CNIDeviceInfoFile when the entry declares that capability,
// and Multus copies the file into the pod's network-status "device-info".
//
// The file is written once, atomically, never over a file that is there
// (the runtime's copy of a device plugin's file, or anyone else's), and
// removed only when it holds exactly what the plugin writes for the device,
// so a record read back from disk cannot make DEL remove another file.
package devinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
)

// SpecVersion is the device-info specification version written.
const SpecVersion = "1.1.0"

// ErrExists reports that a file is already at the path: it is left as is.
var ErrExists = errors.New("a device-info file is already there")

// maxSize bounds what is read back; the plugin's file is about 100 bytes.
const maxSize = 4096

type pciInfo struct {
	PCIAddress string `json:"pci-address"`
	RDMADevice string `json:"rdma-device,omitempty"`
}

type info struct {
	Type    string  `json:"type"`
	Version string  `json:"version"`
	PCI     pciInfo `json:"pci"`
}

// Content is the file the plugin writes for the RDMA device rdmaDevice at
// PCI address pci: the spec's "pci" record with its "rdma-device".
func Content(pci, rdmaDevice string) []byte {
	b, _ := json.Marshal(info{Type: "pci", Version: SpecVersion, PCI: pciInfo{PCIAddress: pci, RDMADevice: rdmaDevice}})
	return append(b, '\n')
}

// CheckPath refuses a path that is not clean and absolute.
func CheckPath(path string) error {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return fmt.Errorf("device-info path %q is not a clean absolute file path", path)
	}
	return nil
}

// tempPath is where Write prepares the file: beside it, hidden, and named
// after it, so a temporary file a killed call left is found again.
func tempPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".rdma-chain-tmp")
}

// Write creates path holding data: missing parent folders are created (the
// spec's), data goes to a temporary file beside it, synced, and is linked
// to path, which fails with ErrExists, changing nothing, when any file
// (even a dangling symbolic link) is there.
func Write(path string, data []byte) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create the device-info folder: %w", err)
	}
	tmp := tempPath(path)
	if err := removeIfPrefix(tmp, data); err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return fmt.Errorf("write device-info file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		failpoint.Hit("add-device-info-prepared")
		err = os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%s: %w", path, ErrExists)
		}
	}
	if rerr := os.Remove(tmp); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// Remove removes path and a temporary file Write left beside it, each only
// when it is a regular file holding data (the temporary one: a beginning of
// it). Anything else, a missing file included, is left as is and no error.
func Remove(path string, data []byte) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if err := removeIfPrefix(tempPath(path), data); err != nil {
		return err
	}
	got, err := readRegular(path)
	if err != nil || !bytes.Equal(got, data) {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove device-info file: %w", err)
	}
	return nil
}

// removeIfPrefix removes name when it is a regular file holding a
// beginning of data.
func removeIfPrefix(name string, data []byte) error {
	got, err := readRegular(name)
	if err != nil || got == nil || !bytes.HasPrefix(data, got) {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove device-info temporary file: %w", err)
	}
	return nil
}

// readRegular reads name without following a symbolic link; it returns nil
// and no error when there is no file, a link or no regular file there, or
// one larger than any file the plugin writes.
func readRegular(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read device-info file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read device-info file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read device-info file: %w", err)
	}
	if len(b) > maxSize {
		return nil, nil
	}
	return b, nil
}
