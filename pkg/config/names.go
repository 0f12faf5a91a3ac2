package config

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// shape is a name pattern: the first character, the middle ones and the
// last one each from a character set, within a length range, optionally
// followed by one "/suffix" of its own shape. It stands in for regular
// expressions, which compiled at package init would cost every plugin
// start, on every verb (docs/performance.md); names_test.go checks each
// shape against the expression it stands for.
type shape struct {
	first, middle, last charset
	min, max            int
	suffix              *shape
}

// MatchString reports whether s has an allowed length and shape.
func (p shape) MatchString(s string) bool {
	if len(s) < p.min || len(s) > p.max {
		return false
	}
	if p.suffix != nil {
		if head, tail, ok := strings.Cut(s, "/"); ok {
			return p.matchChars(head) && p.suffix.MatchString(tail)
		}
	}
	return p.matchChars(s)
}

func (p shape) matchChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		set := p.middle
		switch {
		case i == 0:
			set = p.first
		case i == len(s)-1:
			set = p.last
		}
		if !set.has(s[i]) {
			return false
		}
	}
	return true
}

// charset is ASCII letters and digits as selected, plus extra bytes.
type charset struct {
	upper, lower, digit bool
	extra               string
}

func (set charset) has(b byte) bool {
	switch {
	case 'A' <= b && b <= 'Z':
		return set.upper
	case 'a' <= b && b <= 'z':
		return set.lower
	case '0' <= b && b <= '9':
		return set.digit
	}
	return strings.IndexByte(set.extra, b) >= 0
}

func alnum(extra string) charset      { return charset{upper: true, lower: true, digit: true, extra: extra} }
func lowerAlnum(extra string) charset { return charset{lower: true, digit: true, extra: extra} }

// same is a shape whose every character comes from one set.
func same(set charset, minLen, maxLen int) shape {
	return shape{first: set, middle: set, last: set, min: minLen, max: maxLen}
}

var (
	// devNameRE matches RDMA device and netdev names (IFNAMSIZ 16 incl. NUL):
	// ^[A-Za-z0-9_][A-Za-z0-9_.:-]*$
	devNameRE = shape{first: alnum("_"), middle: alnum("_.:-"), last: alnum("_.:-"), min: 1, max: 15}
	// ifPrefixRE matches the pod interface name prefix, ^[A-Za-z0-9_-]+$,
	// short enough that an index of up to three digits keeps the name
	// within IFNAMSIZ.
	ifPrefixRE = same(alnum("_-"), 1, 12)
	// claimIfNameRE matches a claim configuration's ifName: the entry's
	// characters, a whole interface name (IFNAMSIZ - 1).
	claimIfNameRE = same(alnum("_-"), 1, 15)
	// deviceIDRE matches what any device ID (a device name, a PCI address,
	// a device plugin's ID such as erdma_0/17 or eni-3) may look like at
	// all, a name that does not start with a dot with at most one "/suffix",
	// ^[A-Za-z0-9_][A-Za-z0-9_.:-]*(/[A-Za-z0-9_-]+)?$.
	deviceIDRE = shape{first: alnum("_"), middle: alnum("_.:-"), last: alnum("_.:-"), min: 1, max: 64,
		suffix: &shape{first: alnum("_-"), middle: alnum("_-"), last: alnum("_-"), min: 1, max: 64}}
	// pluginNameRE matches the name of a CNI plugin binary looked up in
	// CNI_PATH, never a path, ^[A-Za-z0-9][A-Za-z0-9_.-]*$.
	pluginNameRE = shape{first: alnum(""), middle: alnum("_.-"), last: alnum("_.-"), min: 1, max: 64}
	// networkNameRE matches the CNI spec's network names and container IDs (as
	// pluginNameRE, up to 1024 bytes).
	networkNameRE = shape{first: alnum(""), middle: alnum("_.-"), last: alnum("_.-"), min: 1, max: 1024}
	// resourceDomainRE and resourceNameRE match the two halves of an
	// extended resource name, domain/name: ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$
	// and ^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$.
	resourceDomainRE = shape{first: lowerAlnum(""), middle: lowerAlnum(".-"), last: lowerAlnum(""), min: 1, max: 253}
	resourceNameRE   = shape{first: alnum(""), middle: alnum("_.-"), last: alnum(""), min: 1, max: 63}
	// draDriverRE matches DRA driver names, DNS subdomains of at most 63
	// characters (resource.k8s.io), ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$.
	draDriverRE = shape{first: lowerAlnum(""), middle: lowerAlnum(".-"), last: lowerAlnum(""), min: 1, max: 63}
	// pnetRE matches SMC PNETIDs, 1-16 alphanumerics, ^[A-Za-z0-9]+$.
	pnetRE = same(alnum(""), 1, 16)
	// ueidRE matches SMC UEIDs, up to 32 characters of A-Z, 0-9, '.' and
	// '-' starting alphanumeric, ^[A-Za-z0-9][A-Za-z0-9.-]*$.
	ueidRE = shape{first: alnum(""), middle: alnum(".-"), last: alnum(".-"), min: 1, max: 32}
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
