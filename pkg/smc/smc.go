package smc

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrUnavailable means the SMC generic netlink family is missing (the
// module is not loaded or not built).
var ErrUnavailable = errors.New("SMC is not available on this kernel")

// ErrExists means the kernel answered EEXIST to an ADD.
var ErrExists = errors.New("pnet entry exists")

// maxPnetIDLen is SMC_MAX_PNETID_LEN.
const maxPnetIDLen = 16

// PnetEntry is one row of a pnet table. Exactly one of EthName and IBName is
// set in entries this package adds; the kernel reports "n/a" for the other
// kind, which decoding turns into "" (and IBPort 255 into 0).
type PnetEntry struct {
	PnetID  string // 1-16 alphanumerics, kernel upper-cases
	EthName string // netdev name (pod-side entry)
	IBName  string // RDMA device name (init_net entry)
	IBPort  uint8  // 1-2 with IBName; 0 means the kernel default 1
}

// String renders the entry like smc_pnet prints it.
func (e PnetEntry) String() string {
	if e.IBName != "" {
		return fmt.Sprintf("%s ib %s port %d", e.PnetID, e.IBName, e.IBPort)
	}
	return fmt.Sprintf("%s eth %s", e.PnetID, e.EthName)
}

// isIB reports whether the entry describes an RDMA device port.
func (e PnetEntry) isIB() bool { return e.IBName != "" }

// sameTarget reports whether a and b name the same netdev or IB port.
func (e PnetEntry) sameTarget(o PnetEntry) bool {
	if e.isIB() {
		return o.IBName == e.IBName && o.IBPort == e.IBPort
	}
	return e.EthName != "" && o.EthName == e.EthName
}

// normalized upper-cases the PNETID and defaults an IB port to 1, as the
// kernel does.
func (e PnetEntry) normalized() PnetEntry {
	e.PnetID = strings.ToUpper(e.PnetID)
	if e.isIB() && e.IBPort == 0 {
		e.IBPort = 1
	}
	return e
}

// validate checks an entry that comes back from an attachment record on
// disk (a trust boundary) before it decides what to delete. Entries built
// from the plugin's validated configuration and the kernel's names are not
// checked again; the kernel refuses (EINVAL) what it cannot take.
func (e PnetEntry) validate() error {
	if !ValidPnetID(e.PnetID) {
		return fmt.Errorf("invalid PNETID %q: need 1-%d characters [A-Za-z0-9]", e.PnetID, maxPnetIDLen)
	}
	if (e.EthName == "") == (e.IBName == "") {
		return fmt.Errorf("pnet entry %q: set exactly one of netdev and RDMA device", e.PnetID)
	}
	if len(e.EthName) > 15 {
		return fmt.Errorf("pnet entry %q: netdev name %q longer than 15", e.PnetID, e.EthName)
	}
	if len(e.IBName) > 63 {
		return fmt.Errorf("pnet entry %q: RDMA device name %q longer than 63", e.PnetID, e.IBName)
	}
	if e.IBPort > 2 {
		return fmt.Errorf("pnet entry %q: IB port %d not in 1-2", e.PnetID, e.IBPort)
	}
	return nil
}

// ConflictError says the netdev or IB port already carries another PNETID.
type ConflictError struct{ Existing PnetEntry }

// Error names the entry in the way.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("pnet conflict: %s already present", e.Existing)
}

// Is lets errors.Is(err, ErrExists) match a conflict.
func (e *ConflictError) Is(target error) bool { return target == ErrExists }

// ValidPnetID reports whether s is 1-16 characters of [A-Za-z0-9]. The
// kernel also trims surrounding blanks; this stricter check does not.
func ValidPnetID(s string) bool {
	if len(s) == 0 || len(s) > maxPnetIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

// PnetIDFromMAC is the ENI MAC in upper case without colons (the
// alibabacloud-erdma-controller convention), 12 characters for a MAC-48.
func PnetIDFromMAC(mac net.HardwareAddr) string {
	return strings.ToUpper(strings.ReplaceAll(mac.String(), ":", ""))
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z'
}
