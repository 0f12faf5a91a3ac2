package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// bounded is a pattern with a length range. Lengths are checked apart
// because counted repetitions like {0,251} make the regexp compiler build
// programs that cost milliseconds at every plugin start.
type bounded struct {
	re       *regexp.Regexp
	min, max int
}

func pattern(expr string, minLen, maxLen int) bounded {
	return bounded{re: regexp.MustCompile(expr), min: minLen, max: maxLen}
}

// MatchString reports whether s has an allowed length and matches.
func (b bounded) MatchString(s string) bool {
	return len(s) >= b.min && len(s) <= b.max && b.re.MatchString(s)
}

var (
	// devNameRE matches RDMA device and netdev names (IFNAMSIZ 16 incl. NUL).
	devNameRE = pattern(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`, 1, 15)
	// ifPrefixRE: the pod interface name prefix; an index of up to three
	// digits keeps the name within IFNAMSIZ.
	ifPrefixRE = pattern(`^[A-Za-z0-9_-]+$`, 1, 12)
	// deviceIDRE: what any device ID (a device name, a PCI address, a
	// device plugin's ID such as erdma_0/17 or eni-3) may look like at all:
	// a name that does not start with a dot, and at most one "/suffix".
	deviceIDRE = pattern(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*(/[A-Za-z0-9_-]+)?$`, 1, 64)
	// pluginNameRE: a CNI plugin binary looked up in CNI_PATH; never a path.
	pluginNameRE = pattern(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`, 1, 64)
	// networkNameRE: the CNI spec's network names and container IDs.
	networkNameRE = pattern(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`, 1, 1024)
	// resourceDomainRE and resourceNameRE: extended resource names, domain/name.
	resourceDomainRE = pattern(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`, 1, 253)
	resourceNameRE   = pattern(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`, 1, 63)
	// pnetRE: SMC PNETIDs are 1-16 alphanumerics.
	pnetRE = pattern(`^[A-Za-z0-9]+$`, 1, 16)
	// ueidRE: SMC UEIDs are up to 32 characters of A-Z, 0-9, '.', '-', starting alphanumeric.
	ueidRE = pattern(`^[A-Za-z0-9][A-Za-z0-9.-]*$`, 1, 32)
)

// ValidDeviceID reports whether id may be an RDMA device ID at all: a device
// name, a PCI address or a device plugin's ID, at most 64 bytes. Parse
// applies it to deviceID and runtimeConfig.deviceID; callers apply it to IDs
// from other sources (kubelet's pod-resources API).
func ValidDeviceID(id string) bool { return deviceIDRE.MatchString(id) }

// ValidIfName checks an interface name as the kernel's dev_valid_name does
// (the CNI library's rule). Parse has applied it to every name it returns;
// callers apply it to names from other sources (state records, the kernel).
func ValidIfName(name string) error {
	if err := utils.ValidateInterfaceName(name); err != nil {
		return fmt.Errorf("invalid interface name %q: %s", truncate(name), err.Msg)
	}
	return nil
}

func validResourceName(r string) bool {
	domain, name, ok := strings.Cut(r, "/")
	return ok && resourceDomainRE.MatchString(domain) && resourceNameRE.MatchString(name)
}
