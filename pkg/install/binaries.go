package install

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// OpsBinary is the name of the operator binary (not installed: it runs in
// the DaemonSet's image).
const OpsBinary = "rdma-chain-ops"

// PluginBinaries are the files install copies into the runtime's CNI bin
// dir, in this order: the plugin runs the SMC socket hook's loader from its
// own directory, so the loader is in place before the plugin that needs it.
var PluginBinaries = []string{hookcmd.Binary, conflist.PluginType}

// Binaries copies each of names from the directory src into the
// directory dst and says what it did, one line per binary. Each copy is
// atomic: written to a hidden name in dst, synced, renamed over the old
// binary (a running plugin keeps its old file). dst itself and every file
// in dst or src it touches must not be a symlink: it is opened with
// O_NOFOLLOW and the files relative to it, so nothing can redirect a write
// as root. A binary already there with the same bytes and mode 0755 is left
// alone. Hidden temporary files a killed run left behind are removed.
func Binaries(src, dst string, names []string) ([]string, error) {
	srcFD, err := openDirNoFollow(src)
	if err != nil {
		return nil, err
	}
	defer unix.Close(srcFD)
	dstFD, err := openDirNoFollow(dst)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dstFD)
	var done []string
	for _, name := range names {
		what, err := installBinary(srcFD, dstFD, name)
		if err != nil {
			return done, fmt.Errorf("install %s/%s into %s: %w", src, name, dst, err)
		}
		done = append(done, dst+"/"+name+": "+what)
	}
	return done, unix.Fsync(dstFD)
}

func openDirNoFollow(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	// O_DIRECTORY wins over O_NOFOLLOW: a symlink to a directory is ENOTDIR.
	var st unix.Stat_t
	isLink := err != nil && unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
	switch {
	case errors.Is(err, unix.ELOOP) || isLink:
		return -1, fmt.Errorf("refusing %s: it is a symlink", dir)
	case errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("refusing %s: not a directory", dir)
	case err != nil:
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

func installBinary(srcFD, dstFD int, name string) (string, error) {
	data, err := readAtNoFollow(srcFD, name)
	if err != nil {
		return "", err
	}
	if err := sweepTemps(dstFD, name); err != nil {
		return "", err
	}
	old, err := readAtNoFollow(dstFD, name)
	switch {
	case err == nil && bytes.Equal(old, data) && modeAt(dstFD, name) == 0o755:
		return "unchanged", nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	tmp, err := writeTemp(dstFD, name, data)
	if err != nil {
		return "", err
	}
	// renameat replaces a symlink rather than following it; refusing one
	// that appeared since the read keeps an operator's link as it is.
	if isSymlinkAt(dstFD, name) {
		_ = unix.Unlinkat(dstFD, tmp, 0)
		return "", fmt.Errorf("refusing %s: it is a symlink", name)
	}
	if err := unix.Renameat(dstFD, tmp, dstFD, name); err != nil {
		_ = unix.Unlinkat(dstFD, tmp, 0)
		return "", fmt.Errorf("rename %s: %w", tmp, err)
	}
	if old == nil {
		return "installed", nil
	}
	return "replaced", nil
}

// readAtNoFollow reads the regular file name in the directory dirFD; a
// missing file is os.ErrNotExist, a symlink or anything else is refused.
func readAtNoFollow(dirFD int, name string) ([]byte, error) {
	fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, os.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("refusing %s: it is a symlink", name)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("refusing %s: not a regular file", name)
	}
	return io.ReadAll(f)
}

func modeAt(dirFD int, name string) os.FileMode {
	var st unix.Stat_t
	if unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return 0
	}
	return os.FileMode(st.Mode & 0o7777)
}

func isSymlinkAt(dirFD int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// tempPrefix is the hidden name a binary is written under before its rename.
func tempPrefix(name string) string { return "." + name + ".tmp-" }

// writeTemp writes data, mode 0755 and synced, to a new hidden file in the
// directory dirFD and returns its name.
func writeTemp(dirFD int, name string, data []byte) (string, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	tmp := tempPrefix(name) + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dirFD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o700)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", tmp, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o755)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = unix.Unlinkat(dirFD, tmp, 0)
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	return tmp, nil
}

// sweepTemps removes the hidden temporary files of name that a killed
// install left in the directory dirFD (unlinkat never follows a symlink).
func sweepTemps(dirFD int, name string) error {
	d, err := unix.Dup(dirFD)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(d), "cni bin dir")
	defer dir.Close()
	if _, err := dir.Seek(0, io.SeekStart); err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		// ".NAME.tmp" is what the earlier shell installer used.
		if strings.HasPrefix(n, "."+name+".tmp") {
			if err := unix.Unlinkat(dirFD, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove %s: %w", n, err)
			}
		}
	}
	return nil
}
