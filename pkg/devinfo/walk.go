package devinfo

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links one walk follows (the kernel's own
// bound is 40).
const maxLinks = 8

// ErrUntrustedLink reports a symbolic link in a device-info path that
// someone other than root could have placed.
var ErrUntrustedLink = errors.New("a symbolic link someone other than root could have placed")

// openDir opens the folder dir (absolute, clean) component by component
// without following a symbolic link unless root owns it and the folder
// holding it, which only root may write (the /var/run -> /run of systemd
// hosts); any other link is ErrUntrustedLink. With create, missing folders
// are created 0755 and returned, outermost first. The caller closes fd.
func openDir(dir string, create bool) (fd int, created []string, err error) {
	fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open /: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
			fd = -1
		}
	}()
	todo, cur, links := components(dir), "/", 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		var st unix.Stat_t
		err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				created = append(created, filepath.Join(cur, name))
				err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
		if err != nil {
			return -1, created, fmt.Errorf("%s: %w", filepath.Join(cur, name), err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if links++; links > maxLinks {
				return -1, created, fmt.Errorf("%s: %w", filepath.Join(cur, name), unix.ELOOP)
			}
			target, err := followable(fd, name, filepath.Join(cur, name), &st)
			if err != nil {
				return -1, created, err
			}
			if filepath.IsAbs(target) {
				unix.Close(fd)
				if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return -1, created, fmt.Errorf("open /: %w", err)
				}
				cur = "/"
			}
			todo = append(components(target), todo...)
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, created, fmt.Errorf("%s: %w", filepath.Join(cur, name), err)
		}
		unix.Close(fd)
		fd, cur = next, filepath.Join(cur, name)
	}
	return fd, created, nil
}

// followable returns the target of the link name in folder fd when root
// owns the link and the folder, which only root may write.
func followable(fd int, name, path string, st *unix.Stat_t) (string, error) {
	var dir unix.Stat_t
	if err := unix.Fstat(fd, &dir); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if st.Uid != 0 || dir.Uid != 0 || dir.Mode&0o022 != 0 {
		return "", fmt.Errorf("%s: %w (link owner %d, folder owner %d, mode %o)", path, ErrUntrustedLink, st.Uid, dir.Uid, dir.Mode&0o7777)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return string(buf[:n]), nil
}

// components splits a path into its names, dropping empty ones and ".".
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// RemoveDirs removes the folders in dirs (outermost first) that are empty,
// innermost first, each reached without following an untrusted link; a
// folder not empty or already gone stays as it is.
func RemoveDirs(dirs []string) error {
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		fd, _, err := openDir(filepath.Dir(dirs[i]), false)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err == nil {
			err = unix.Unlinkat(fd, filepath.Base(dirs[i]), unix.AT_REMOVEDIR)
			unix.Close(fd)
		}
		if err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove device-info folder %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// MissingDirs returns the folders of path's parent that do not exist yet,
// outermost first: the ones Write will create, which a caller records
// before writing so that a crash in between leaves none unrecorded. Like
// Write, it follows no link but a trusted one.
func MissingDirs(path string) ([]string, error) {
	if err := CheckPath(path); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	var missing []string
	for {
		fd, _, err := openDir(dir, false)
		if err == nil {
			unix.Close(fd)
			return missing, nil
		}
		if !errors.Is(err, unix.ENOENT) || dir == "/" {
			return nil, fmt.Errorf("open the device-info folder: %w", err)
		}
		missing = append([]string{dir}, missing...)
		dir = filepath.Dir(dir)
	}
}
