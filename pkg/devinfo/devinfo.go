package devinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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

// MaxPathLen bounds a device-info path (runtimes write about 100 bytes).
const MaxPathLen = 1024

// CheckPath refuses a device-info path that is empty, relative, not clean
// (a ".." or "." component, a doubled or trailing slash), "/", longer than
// MaxPathLen bytes, with a name longer than 255 bytes, or with a NUL.
func CheckPath(path string) error {
	switch {
	case path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/":
		return fmt.Errorf("device-info path %.64q is not a clean absolute file path", path)
	case len(path) > MaxPathLen:
		return fmt.Errorf("device-info path %.64q... is longer than %d bytes", path, MaxPathLen)
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("device-info path %.64q holds a NUL byte", path)
	}
	for _, c := range components(path) {
		if len(c) > 255 {
			return fmt.Errorf("device-info path %.64q has a name longer than 255 bytes", path)
		}
	}
	return nil
}

// tempName is where Write prepares the file: beside it, hidden, and named
// after it, so a temporary file a killed call left is found again.
func tempName(base string) string { return "." + base + ".rdma-chain-tmp" }

// tempPath is tempName's full path.
func tempPath(path string) string {
	return filepath.Join(filepath.Dir(path), tempName(filepath.Base(path)))
}

// Write creates path holding data and returns the folders it created for
// it, outermost first (the spec's: missing parent folders are created).
// No symbolic link is followed on the way but one root placed in a folder
// only root may write (openDir). data goes to a temporary file beside path,
// synced, and is linked to path, which fails with ErrExists, changing
// nothing, when any file (even a dangling symbolic link) is there.
func Write(path string, data []byte) (created []string, err error) {
	if err := CheckPath(path); err != nil {
		return nil, err
	}
	dir, created, err := openDir(filepath.Dir(path), true)
	if err != nil {
		return created, fmt.Errorf("open the device-info folder: %w", err)
	}
	defer unix.Close(dir)
	base := filepath.Base(path)
	tmp := tempName(base)
	if err := removeIfPrefix(dir, tmp, data); err != nil {
		return created, err
	}
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return created, fmt.Errorf("write device-info file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		failpoint.Hit("add-device-info-prepared")
		err = unix.Linkat(dir, tmp, dir, base, 0)
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%s: %w", path, ErrExists)
		}
	}
	if rerr := unix.Unlinkat(dir, tmp, 0); rerr != nil && err == nil {
		err = rerr
	}
	return created, err
}

// Remove removes path and a temporary file Write left beside it, each only
// when it is a regular file holding data (the temporary one: a beginning of
// it), then the folders in dirs (Write's) that are empty. Anything else, a
// missing file or folder included, is left as is and no error.
func Remove(path string, data []byte, dirs []string) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	dir, _, err := openDir(filepath.Dir(path), false)
	if errors.Is(err, unix.ENOENT) {
		return RemoveDirs(dirs)
	}
	if err != nil {
		return fmt.Errorf("open the device-info folder: %w", err)
	}
	defer unix.Close(dir)
	base := filepath.Base(path)
	if err := removeIfPrefix(dir, tempName(base), data); err != nil {
		return err
	}
	got, err := readRegular(dir, base)
	if err != nil {
		return err
	}
	if bytes.Equal(got, data) {
		if err := unix.Unlinkat(dir, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove device-info file: %w", err)
		}
	}
	return RemoveDirs(dirs)
}

// removeIfPrefix removes name in dir when it is a regular file holding a
// beginning of data.
func removeIfPrefix(dir int, name string, data []byte) error {
	got, err := readRegular(dir, name)
	if err != nil || got == nil || !bytes.HasPrefix(data, got) {
		return err
	}
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove device-info temporary file: %w", err)
	}
	return nil
}

// readRegular reads name in dir without following a symbolic link; it returns nil
// and no error when there is no file, a link or no regular file there, or
// one larger than any file the plugin writes.
func readRegular(dir int, name string) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read device-info file: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
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
