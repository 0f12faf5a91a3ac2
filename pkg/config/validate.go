package config

import (
	"regexp"
	"strings"
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
	// resourceDomainRE and resourceNameRE: extended resource names, domain/name.
	resourceDomainRE = pattern(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`, 1, 253)
	resourceNameRE   = pattern(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`, 1, 63)
	// pnetRE: SMC PNETIDs are 1-16 alphanumerics.
	pnetRE = pattern(`^[A-Za-z0-9]+$`, 1, 16)
	// ueidRE: SMC UEIDs are up to 32 characters of A-Z, 0-9, '.', '-', starting alphanumeric.
	ueidRE = pattern(`^[A-Za-z0-9][A-Za-z0-9.-]*$`, 1, 32)
)

func validResourceName(r string) bool {
	domain, name, ok := strings.Cut(r, "/")
	return ok && resourceDomainRE.MatchString(domain) && resourceNameRE.MatchString(name)
}

var sharedModes = map[string]map[string]bool{
	LinkIPVlan:  {"l2": true, "l3": true, "l3s": true},
	LinkMACVlan: {"bridge": true, "private": true, "vepa": true, "passthru": true},
	LinkNone:    {"": true},
}

func (c *NetConf) validate() error {
	checks := []func() error{
		c.validateBasics, c.validateDevices, c.validateSelection,
		c.validateLinks, c.validateSMCR, c.validatePaths,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *NetConf) validateBasics() error {
	if c.CNIVersion == "" {
		return invalid("cniVersion", "is required")
	}
	if c.Name == "" {
		return invalid("name", "is required")
	}
	if !oneOf(c.Mode, ModeAuto, ModeExclusive, ModeShared) {
		return invalid("mode", "must be auto, exclusive or shared, got %q", c.Mode)
	}
	if !oneOf(c.LogLevel, "debug", "info", "warn", "error") {
		return invalid("logLevel", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	return nil
}

func (c *NetConf) validateDevices() error {
	seen := map[string]bool{}
	for _, d := range c.Devices {
		if !devNameRE.MatchString(d) {
			return invalid("devices", "%q is not a valid RDMA device or netdev name", d)
		}
		if seen[d] {
			return invalid("devices", "%q is listed twice", d)
		}
		seen[d] = true
	}
	return nil
}

func (c *NetConf) validateSelection() error {
	if !oneOf(c.PodSelection, SelectRequested, SelectAll) {
		return invalid("podSelection", "must be requested or all, got %q", c.PodSelection)
	}
	if c.PodSelection == SelectRequested && len(c.ResourceNames) == 0 {
		return invalid("resourceNames", "must not be empty with podSelection requested")
	}
	for _, r := range c.ResourceNames {
		if !validResourceName(r) {
			return invalid("resourceNames", "%q is not an extended resource name (domain/name)", r)
		}
	}
	return nil
}

func (c *NetConf) validateLinks() error {
	if !devNameRE.MatchString(c.IfName) || len(c.IfName) > 12 || strings.ContainsAny(c.IfName, ".:") {
		return invalid("ifName", "%q must be 1-12 characters of [A-Za-z0-9_-]", c.IfName)
	}
	modes, ok := sharedModes[c.SharedLink.Type]
	if !ok {
		return invalid("sharedLink.type", "must be ipvlan, macvlan or none, got %q", c.SharedLink.Type)
	}
	if !modes[c.SharedLink.Mode] {
		return invalid("sharedLink.mode", "%q is not a mode of %s", c.SharedLink.Mode, c.SharedLink.Type)
	}
	if len(c.RawIPAM) > 0 && string(c.RawIPAM) != "null" && c.IPAM.Type == "" {
		return invalid("ipam.type", "is required when ipam is set")
	}
	return nil
}

func (c *NetConf) validateSMCR() error {
	if c.SMCR.PnetID != "" && !pnetRE.MatchString(c.SMCR.PnetID) {
		return invalid("smcr.pnetId", "%q must be 1-16 alphanumerics", c.SMCR.PnetID)
	}
	if c.SMCR.UEID != "" && !ueidRE.MatchString(c.SMCR.UEID) {
		return invalid("smcr.ueid", "%q must be 1-32 characters of A-Z, 0-9, '.', '-'", c.SMCR.UEID)
	}
	if !oneOf(c.SMCR.OnUnsupported, "fail", "warn") {
		return invalid("smcr.onUnsupported", "must be fail or warn, got %q", c.SMCR.OnUnsupported)
	}
	return nil
}

func (c *NetConf) validatePaths() error {
	if err := absPath("dataDir", c.DataDir, false); err != nil {
		return err
	}
	if err := absPath("logFile", c.LogFile, true); err != nil {
		return err
	}
	return absPath("podResourcesSocket", c.PodResourcesSocket, false)
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
