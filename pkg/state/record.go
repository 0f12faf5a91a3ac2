package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
)

// ErrCorrupt matches (errors.Is) every *CorruptError.
var ErrCorrupt = errors.New("corrupt attachment record")

// maxRecordSize bounds what is read from a record file; real records are a
// few KiB.
const maxRecordSize = 1 << 20

// CorruptError reports a file at a record path that cannot be read as the
// expected record: undecodable, of an unknown version, incomplete, holding
// another key, or not a regular file at all. Quarantine moves it aside.
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("unreadable attachment record %s: %v", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// checkKey refuses a key with an empty field.
func checkKey(k Key) error {
	switch {
	case k.Network == "":
		return errors.New("no network name")
	case k.ContainerID == "":
		return errors.New("no container ID")
	case k.IfName == "":
		return errors.New("no interface name")
	case !utf8.ValidString(k.Network + k.ContainerID + k.IfName):
		// JSON would replace the invalid bytes: the record could not be
		// read back under its key.
		return errors.New("key is not valid UTF-8")
	}
	return nil
}

// decodeRecord parses and validates one record. Every failure is a
// *CorruptError for path.
func decodeRecord(path string, data []byte) (*Record, error) {
	corrupt := func(err error) (*Record, error) { return nil, &CorruptError{Path: path, Err: err} }
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return corrupt(errors.New("empty file"))
	}
	if trimmed[0] != '{' {
		return corrupt(errors.New("not a JSON object"))
	}
	var r Record
	if err := json.Unmarshal(trimmed, &r); err != nil {
		return corrupt(fmt.Errorf("decode: %w", err))
	}
	switch {
	case r.Version <= 0:
		return corrupt(fmt.Errorf("no valid version (%d)", r.Version))
	case r.Version > Version:
		return corrupt(fmt.Errorf("version %d is newer than supported version %d", r.Version, Version))
	}
	if err := checkKey(r.Key()); err != nil {
		return corrupt(err)
	}
	if err := checkDeviceInfo(r.DeviceInfo); err != nil {
		return corrupt(err)
	}
	if err := checkChildIDs(r.Links); err != nil {
		return corrupt(err)
	}
	if r.BootID != "" && !bootIDPattern.MatchString(r.BootID+"\n") {
		// A wrong one would make a release skip the kernel's undo (BootOf).
		return corrupt(fmt.Errorf("bootId %.40q is not a boot id", r.BootID))
	}
	return &r, nil
}

// checkChildIDs refuses a link whose pod nsid and ifindex are not both
// recorded, or are out of range, or name something other than a child: a
// release would look up, and delete, a link the record never made.
func checkChildIDs(links []Link) error {
	for _, l := range links {
		if l.PodNetnsID == nil && l.PodIndex == 0 {
			continue
		}
		switch {
		case l.PodNetnsID == nil || *l.PodNetnsID < 0 || l.PodIndex <= 0 || l.PodIndex > math.MaxInt32:
			return fmt.Errorf("link %.16q: pod nsid and ifindex (%d) not recorded together", l.PodName, l.PodIndex)
		case l.MAC == "":
			return fmt.Errorf("link %.16q: a pod nsid without the child's MAC", l.PodName)
		case l.Kind != LinkIPVlan && l.Kind != LinkMACVlan:
			return fmt.Errorf("link %.16q: a pod nsid on a %.16q link, not a child", l.PodName, l.Kind)
		}
	}
	return nil
}

// checkDeviceInfo refuses a device-info path devinfo.CheckPath refuses and
// a created folder that is not one of the path's own.
func checkDeviceInfo(di *DeviceInfo) error {
	if di == nil {
		return nil
	}
	if err := devinfo.CheckPath(di.Path); err != nil {
		return err
	}
	if len(di.Dirs) > 64 {
		return fmt.Errorf("device-info file with %d created folders", len(di.Dirs))
	}
	for _, d := range di.Dirs {
		if err := devinfo.CheckPath(d); err != nil || !strings.HasPrefix(di.Path, d+"/") {
			return fmt.Errorf("device-info folder %.64q is not a folder of %.64q", d, di.Path)
		}
	}
	return nil
}

// readRecord reads the record file at path without following a symbolic
// link. The record must belong to want when want is not nil, and its key must
// map to path's file name in any case. A missing file yields an error
// wrapping fs.ErrNotExist; a file that is not a record, a *CorruptError.
func readRecord(path string, want *Key) (*Record, error) {
	data, err := readRegular(path)
	if err != nil {
		return nil, err
	}
	r, err := decodeRecord(path, data)
	if err != nil {
		return nil, err
	}
	if want != nil && r.Key() != *want {
		return nil, &CorruptError{Path: path, Err: fmt.Errorf("holds network %q container %q interface %q, not the requested %q %q %q",
			r.Network, r.ContainerID, r.IfName, want.Network, want.ContainerID, want.IfName)}
	}
	if fileName(r.Key()) != filepath.Base(path) {
		return nil, &CorruptError{Path: path, Err: fmt.Errorf("holds network %q container %q interface %q, whose file name is %s",
			r.Network, r.ContainerID, r.IfName, fileName(r.Key()))}
	}
	return r, nil
}

// readRegular reads a regular file of at most maxRecordSize bytes. A symbolic
// link, directory or other non-regular file is reported as a *CorruptError;
// O_NONBLOCK keeps a FIFO from blocking the open.
func readRegular(path string) ([]byte, error) {
	data, _, err := readRegularSmall(path, maxRecordSize)
	return data, err
}

// readRegularSmall is readRegular for files of at most limit bytes; it also
// returns the file's modification time.
func readRegularSmall(path string, limit int) ([]byte, time.Time, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return nil, time.Time{}, &CorruptError{Path: path, Err: fmt.Errorf("not a regular file (%v)", fi.Mode().Type())}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, time.Time{}, &CorruptError{Path: path, Err: errors.New("a symbolic link")}
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, time.Time{}, &CorruptError{Path: path, Err: fmt.Errorf("not a regular file (%v)", fi.Mode().Type())}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > limit {
		return nil, time.Time{}, &CorruptError{Path: path, Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	return data, fi.ModTime(), nil
}

// CorruptPaths returns the paths of every *CorruptError in err's tree (as
// List returns them, joined), for the caller to Quarantine.
func CorruptPaths(err error) []string {
	var paths []string
	if ce, ok := err.(*CorruptError); ok { //nolint:errorlint // walks the tree itself, level by level
		return []string{ce.Path}
	}
	switch e := err.(type) { //nolint:errorlint // as above
	case interface{ Unwrap() []error }:
		for _, sub := range e.Unwrap() {
			paths = append(paths, CorruptPaths(sub)...)
		}
	case interface{ Unwrap() error }:
		paths = CorruptPaths(e.Unwrap())
	}
	return paths
}
