package config

import (
	"fmt"
	"net/netip"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"

	"github.com/containernetworking/cni/pkg/types"
)

var sharedModes = map[string]map[string]bool{
	LinkIPVlan:  {"l2": true, "l3": true, "l3s": true},
	LinkMACVlan: {"bridge": true, "private": true, "vepa": true, "passthru": true},
	LinkNone:    {"": true},
}

func (c *NetConf) validate() error {
	checks := []func() error{
		c.validateBasics, c.validateDevices, c.validateSelection, c.validateLinks, c.validateSoftRoCE,
		c.validateIPAM, c.validateSMCR, c.validatePaths, c.validateAttachments,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *NetConf) validateBasics() error {
	if err := checkVersion(c.CNIVersion); err != nil {
		return err
	}
	if c.Name == "" {
		return invalid("name", "is required")
	}
	if !networkNameRE.MatchString(c.Name) {
		return invalid("name", "%q must be 1-1024 characters of [A-Za-z0-9_.-], starting alphanumeric", truncate(c.Name))
	}
	if !oneOf(c.Mode, ModeAuto, ModeExclusive, ModeShared) {
		return invalid("mode", "must be auto, exclusive or shared, got %q", truncate(string(c.Mode)))
	}
	if !oneOf(c.LogLevel, "debug", "info", "warn", "error") {
		return invalid("logLevel", "must be debug, info, warn or error, got %q", truncate(c.LogLevel))
	}
	return nil
}

func (c *NetConf) validateDevices() error {
	seen := map[string]bool{}
	for _, d := range c.Devices {
		if !devNameRE.MatchString(d) {
			return invalid("devices", "%q is not a valid RDMA device or netdev name", truncate(d))
		}
		if seen[d] {
			return invalid("devices", "%q is listed twice", d)
		}
		seen[d] = true
	}
	if err := validateNodeAddresses(c.NodeAddresses); err != nil {
		return err
	}
	for _, f := range [][2]string{{"deviceID", c.DeviceID}, {"runtimeConfig.deviceID", c.RuntimeConfig.DeviceID}} {
		if f[1] != "" && !ValidDeviceID(f[1]) {
			return invalid(f[0], "%q must be 1-64 characters of [A-Za-z0-9_.:/-]", truncate(f[1]))
		}
	}
	return nil
}

// maxNodeAddresses bounds nodeAddresses: a node's InternalIPs, one per
// family as kubelet reports them, with room for more.
const maxNodeAddresses = 16

// NodeAddrs is NodeAddresses parsed (validated by Parse).
func (c *NetConf) NodeAddrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(c.NodeAddresses))
	for _, s := range c.NodeAddresses {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// validateNodeAddresses accepts unicast IPv4 or IPv6 addresses in their
// canonical form, each once: a value the guard compares with the kernel's
// addresses must mean one address only.
func validateNodeAddresses(addrs []string) error {
	seen := map[netip.Addr]bool{}
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "" || a.String() != s:
			return invalid("nodeAddresses", "%q is not an IP address in canonical form", truncate(s))
		case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast():
			return invalid("nodeAddresses", "%q is not a unicast address a netdev holds", s)
		case seen[a]:
			return invalid("nodeAddresses", "%q is listed twice", s)
		}
		seen[a] = true
	}
	return nil
}

func (c *NetConf) validateSelection() error {
	if !oneOf(c.PodSelection, SelectRequested, SelectAll) {
		return invalid("podSelection", "must be requested or all, got %q", truncate(c.PodSelection))
	}
	if !oneOf(c.KubeletUnreachable, KubeletRetry, KubeletPassThrough) {
		return invalid("kubeletUnreachable", "must be retry or passThrough, got %q", truncate(c.KubeletUnreachable))
	}
	if c.PodSelection == SelectRequested && len(c.ResourceNames) == 0 && len(c.DRADrivers) == 0 {
		return invalid("resourceNames", "must not be empty with podSelection requested and no draDrivers")
	}
	for _, r := range c.ResourceNames {
		if !validResourceName(r) {
			return invalid("resourceNames", "%q is not an extended resource name (domain/name)", truncate(r))
		}
	}
	for _, d := range c.DRADrivers {
		if !draDriverRE.MatchString(d) {
			return invalid("draDrivers", "%q is not a DRA driver name (a DNS subdomain of at most 63 characters)", truncate(d))
		}
	}
	return nil
}

func (c *NetConf) validateLinks() error {
	if !ifPrefixRE.MatchString(c.IfName) {
		return invalid("ifName", "%q must be 1-12 characters of [A-Za-z0-9_-]", truncate(c.IfName))
	}
	modes, ok := sharedModes[c.SharedLink.Type]
	if !ok {
		return invalid("sharedLink.type", "must be ipvlan, macvlan or none, got %q", truncate(c.SharedLink.Type))
	}
	if !modes[c.SharedLink.Mode] {
		return invalid("sharedLink.mode", "%q is not a mode of %s", truncate(c.SharedLink.Mode), c.SharedLink.Type)
	}
	return nil
}

func (c *NetConf) validateIPAM() error {
	if c.RawIPAM != nil && c.IPAM.Type == "" {
		return invalid("ipam.type", "is required when ipam is set")
	}
	if c.IPAM.Type != "" && !pluginNameRE.MatchString(c.IPAM.Type) {
		return invalid("ipam.type", "%q must be a plugin name: 1-64 characters of [A-Za-z0-9_.-], starting alphanumeric, no path", truncate(c.IPAM.Type))
	}
	return c.validatePodIPv6Block()
}

func (c *NetConf) validateSMCR() error {
	if c.SMCR.PnetID != "" && !pnetRE.MatchString(c.SMCR.PnetID) {
		return invalid("smcr.pnetId", "%q must be 1-16 alphanumerics", truncate(c.SMCR.PnetID))
	}
	if c.SMCR.UEID != "" && !ueidRE.MatchString(c.SMCR.UEID) {
		return invalid("smcr.ueid", "%q must be 1-32 characters of A-Z, 0-9, '.', '-'", truncate(c.SMCR.UEID))
	}
	if !oneOf(c.SMCR.OnUnsupported, "fail", "warn") {
		return invalid("smcr.onUnsupported", "must be fail or warn, got %q", truncate(c.SMCR.OnUnsupported))
	}
	if !oneOf(c.SMCR.Transparent, TransparentAuto, TransparentTCP2SMC, TransparentBPF, TransparentOff) {
		return invalid("smcr.transparent", "must be auto, tcp2smc, bpf or off, got %q", truncate(c.SMCR.Transparent))
	}
	if c.SMCR.Namespaces != nil && len(c.SMCR.Namespaces) == 0 {
		return invalid("smcr.namespaces", "is empty: list the namespaces SMC-R serves, or set smcr.enabled to false")
	}
	seen := map[string]bool{}
	for _, ns := range c.SMCR.Namespaces {
		if !namespaceRE.MatchString(ns) {
			return invalid("smcr.namespaces", "%q is not a Kubernetes namespace name (1-63 characters of [a-z0-9-], alphanumeric at both ends)", truncate(ns))
		}
		if seen[ns] {
			return invalid("smcr.namespaces", "%q is listed twice", ns)
		}
		seen[ns] = true
	}
	return absPath("smcr.bpffsDir", c.SMCR.BPFFSDir, false)
}

func (c *NetConf) validatePaths() error {
	if err := absPath("dataDir", c.DataDir, false); err != nil {
		return err
	}
	if err := absPath("logFile", c.LogFile, true); err != nil {
		return err
	}
	if err := deviceInfoPath(c.RuntimeConfig.DeviceInfoFile); err != nil {
		return err
	}
	if err := absPath("cdiDir", c.CDIDir, false); err != nil {
		return err
	}
	return absPath("podResourcesSocket", c.PodResourcesSocket, false)
}

// validateAttachments checks the GC lists with the CNI spec's rules for
// container IDs and interface names.
func (c *NetConf) validateAttachments() error {
	lists := []struct {
		key string
		l   []types.GCAttachment
	}{{"cni.dev/valid-attachments", c.PluginConf.ValidAttachments}, {"cni.dev/attachments", c.LegacyAttachments}}
	for _, list := range lists {
		for i, a := range list.l {
			field := fmt.Sprintf("%s[%d]", list.key, i)
			if !networkNameRE.MatchString(a.ContainerID) {
				return invalid(field+".containerID", "%q is not a container ID", truncate(a.ContainerID))
			}
			if err := ValidIfName(a.IfName); err != nil {
				return invalid(field+".ifname", "%v", err)
			}
		}
	}
	return nil
}

func oneOf[T ~string](v T, allowed ...T) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// deviceInfoPath refuses what devinfo.CheckPath refuses, before anything
// records it.
func deviceInfoPath(p string) error {
	if p == "" {
		return nil
	}
	if err := devinfo.CheckPath(p); err != nil {
		return invalid("runtimeConfig."+DeviceInfoCapability, "%v", err)
	}
	return nil
}
