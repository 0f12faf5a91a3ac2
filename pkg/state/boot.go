package state

import (
	"fmt"
	"io"
	"os"
	"regexp"
)

// BootIDFile is where the kernel gives its boot id: a random UUID made at
// each boot.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// bootIDPattern is the kernel's rendering of a boot id: a lower-case UUID
// and a newline.
var bootIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`)

// ReadBootID reads the boot id at path (BootIDFile on a node) strictly:
// anything but the kernel's rendering of one is an error, never a boot id.
// Records carry it, so that the kernel state of an attachment made in an
// earlier boot (the pod netns, its hook listing, its pnet rows, its
// children), which died with that boot, is told from this boot's.
func ReadBootID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	if !bootIDPattern.Match(data) {
		return "", fmt.Errorf("read the boot id: %s holds %.40q, not a boot id", path, data)
	}
	return string(data[:len(data)-1]), nil
}

// Boot is a record's boot as the running kernel sees it.
type Boot int

const (
	// BootUnknown means the record or the running kernel has no boot id. A
	// record whose netns is alive is of this boot (no netns outlives its
	// boot); one whose netns is gone may be of any boot.
	BootUnknown Boot = iota
	// BootThis means the record was made in the running boot.
	BootThis
	// BootEarlier means the record was made in an earlier boot. Everything it
	// holds in the kernel (the pod netns, its hook listing, pnet rows,
	// children, GIDs) died with that boot: releasing it gives back only
	// what a reboot keeps (IPAM leases, device-info files, the record).
	BootEarlier
)

// BootOf tells which boot the record was made in, current being the
// running kernel's boot id ("" when unreadable).
func (r *Record) BootOf(current string) Boot {
	switch {
	case r.BootID == "" || current == "":
		return BootUnknown
	case r.BootID == current:
		return BootThis
	}
	return BootEarlier
}
