package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// PodBlock returns the podIPv6Block: host bits (the low 64 bits) and a
// prefix length of 64-126, e.g. ::f:0:c00/124. ok is false when unset.
func (c *NetConf) PodBlock() (block netip.Prefix, ok bool) {
	if c.PodIPv6Block == "" {
		return netip.Prefix{}, false
	}
	block, err := netip.ParsePrefix(c.PodIPv6Block)
	return block, err == nil
}

// validatePodIPv6Block checks podIPv6Block: an IPv6 prefix of 64-126 bits
// whose upper 64 bits are zero and whose bits past its length are zero, and
// an ipam section to render its ranges into (without ranges of its own,
// which would contradict the derived ones).
func (c *NetConf) validatePodIPv6Block() error {
	if c.PodIPv6Block == "" {
		return nil
	}
	block, err := netip.ParsePrefix(c.PodIPv6Block)
	switch {
	case err != nil || !block.Addr().Is6() || block.Addr().Is4In6():
		return invalid("podIPv6Block", "%q must be an IPv6 block of host bits such as ::f:0:c00/124", truncate(c.PodIPv6Block))
	case block.Bits() < 64 || block.Bits() > 126:
		return invalid("podIPv6Block", "%q: the prefix length must be 64-126 (a block inside a /64)", truncate(c.PodIPv6Block))
	case block.Masked() != block:
		return invalid("podIPv6Block", "%q has bits set past its length: the block starts at %s", truncate(c.PodIPv6Block), block.Masked())
	}
	if a := block.Addr().As16(); [8]byte(a[:8]) != [8]byte{} {
		return invalid("podIPv6Block", "%q sets bits of the upper 64 (the netdev's /64 supplies them)", truncate(c.PodIPv6Block))
	}
	if c.IPAM.Type == "" {
		return invalid("podIPv6Block", "needs an ipam section: the plugin renders the block into its ranges")
	}
	obj, err := decodeObject(c.RawIPAM)
	if err != nil {
		return errField("ipam", "%v", err)
	}
	// host-local decodes with encoding/json, which matches keys to its
	// fields case-insensitively (Unicode folding: "ſubnet" is its subnet).
	for k := range obj {
		for _, field := range []string{"ranges", "range", "subnet", "rangeStart", "rangeEnd"} {
			if strings.EqualFold(k, field) {
				return invalid("ipam."+truncate(k), "must not be set with podIPv6Block (host-local reads it as %q, case-insensitively): the plugin renders each device's range", field)
			}
		}
	}
	return nil
}

// IPAMStdinRange is IPAMStdin with the ipam section's "ranges" set to the
// one range subnet (host-local's format), as podIPv6Block renders it per
// device.
func (c *NetConf) IPAMStdinRange(subnets ...string) ([]byte, error) {
	ipam := map[string]json.RawMessage{}
	if err := json.Unmarshal(c.RawIPAM, &ipam); err != nil {
		return nil, fmt.Errorf("ipam section: %w", err)
	}
	sets := make([][]map[string]string, len(subnets))
	for i, s := range subnets {
		sets[i] = []map[string]string{{"subnet": s}}
	}
	ranges, err := json.Marshal(sets)
	if err != nil {
		return nil, err
	}
	ipam["ranges"] = ranges
	raw, err := json.Marshal(ipam)
	if err != nil {
		return nil, err
	}
	known := make(map[string]json.RawMessage, len(c.known))
	for k, v := range c.known {
		known[k] = v
	}
	known["ipam"] = raw
	return json.Marshal(known)
}

// hostLocalDefaultDataDir is where host-local keeps its leases without an
// ipam.dataDir.
const hostLocalDefaultDataDir = "/var/lib/cni/networks"

// HostLocalDataDir is the directory a host-local ipam section keeps its
// leases in, read with encoding/json as host-local reads it (keys matched
// case-insensitively), or "" when the ipam is not host-local or cannot be
// read.
func (c *NetConf) HostLocalDataDir() string {
	if c.IPAM.Type != "host-local" {
		return ""
	}
	var ipam struct {
		DataDir string `json:"dataDir"`
	}
	if err := json.Unmarshal(c.RawIPAM, &ipam); err != nil {
		return ""
	}
	if ipam.DataDir == "" {
		return hostLocalDefaultDataDir
	}
	return filepath.Clean(ipam.DataDir)
}
