package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ClaimConfig is the opaque configuration of the DRA driver
// (rdma-chain.github.io) in a ResourceClaim or a DeviceClass: what the
// pod's RDMA interface from that claim device gets, over the network's
// entry. A field not set keeps the entry's. pkg/dra validates it at
// NodePrepareResources and hands it to the plugin in the claim's CDI spec
// (ClaimConfigAnnotation); the plugin applies it at ADD.
type ClaimConfig struct {
	// SMCR turns SMC-R on or off for the pod, as the erdma-smcr annotation
	// does; true only from a DeviceClass (ClaimConfigFromClaim refuses it
	// from a claim): who may use the class decides who gets SMC-R.
	SMCR *bool `json:"smcr,omitempty"`
	// IPv6 turns the pod's own IPv6 address (podIPv6Block) on the
	// interface on or off; on needs an entry with podIPv6Block.
	IPv6 *bool `json:"ipv6,omitempty"`
	// IfName is the interface's name in the pod.
	IfName string `json:"ifName,omitempty"`
	// SharedLink is the shared-mode link type: ipvlan, macvlan or none.
	SharedLink string `json:"sharedLink,omitempty"`
}

// The opaque configuration's kind, and the CDI device annotation that
// carries its resolved form from the driver to the plugin.
const (
	ClaimConfigAPIVersion = DefaultDRADriver + "/v1alpha1"
	ClaimConfigKind       = "RDMAConfig"
	ClaimConfigAnnotation = DefaultDRADriver + "/config"
	// maxClaimConfig bounds the bytes of one configuration read.
	maxClaimConfig = 4096
)

// ParseClaimConfig decodes one opaque configuration strictly: a JSON
// object with apiVersion ClaimConfigAPIVersion and kind ClaimConfigKind,
// no other key than ClaimConfig's (keys are case-sensitive), each value of
// its type and valid. The error names the field.
func ParseClaimConfig(raw []byte) (ClaimConfig, error) {
	var c ClaimConfig
	if len(raw) > maxClaimConfig {
		return c, fmt.Errorf("%d bytes, at most %d", len(raw), maxClaimConfig)
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return c, err
	}
	fields := []field{
		{"apiVersion", constant(ClaimConfigAPIVersion)},
		{"kind", constant(ClaimConfigKind)},
		{"smcr", plain(&c.SMCR)},
		{"ipv6", plain(&c.IPv6)},
		{"ifName", plain(&c.IfName)},
		{"sharedLink", plain(&c.SharedLink)},
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !hasField(fields, k) {
			return c, errField(truncate(k), "unknown field of %s %s", ClaimConfigKind, ClaimConfigAPIVersion)
		}
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if _, ok := obj[k]; !ok {
			return c, errField(k, "missing: want %q", map[string]string{"apiVersion": ClaimConfigAPIVersion, "kind": ClaimConfigKind}[k])
		}
	}
	var w warnings
	if _, err := decodeFields("", obj, fields, &w); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// constant decodes a string that must equal v.
func constant(v string) decodeFn {
	return func(path string, raw json.RawMessage, _ *warnings) error {
		s, err := decodeString(path, raw)
		if err != nil {
			return err
		}
		if s != v {
			return errField(path, "%q, want %q", truncate(s), v)
		}
		return nil
	}
}

// Validate checks each set field.
func (c ClaimConfig) Validate() error {
	if c.IfName != "" && !claimIfNameRE.MatchString(c.IfName) {
		return errField("ifName", "%q must be 1-15 characters of [A-Za-z0-9_-]", truncate(c.IfName))
	}
	switch c.SharedLink {
	case "", LinkIPVlan, LinkMACVlan, LinkNone:
	default:
		return errField("sharedLink", "%q, want one of %s, %s, %s", truncate(c.SharedLink), LinkIPVlan, LinkMACVlan, LinkNone)
	}
	return nil
}

// Over returns c with every field set in o taking o's value.
func (c ClaimConfig) Over(o ClaimConfig) ClaimConfig {
	if o.SMCR != nil {
		c.SMCR = o.SMCR
	}
	if o.IPv6 != nil {
		c.IPv6 = o.IPv6
	}
	if o.IfName != "" {
		c.IfName = o.IfName
	}
	if o.SharedLink != "" {
		c.SharedLink = o.SharedLink
	}
	return c
}

// IsZero reports whether no field is set.
func (c ClaimConfig) IsZero() bool { return c == ClaimConfig{} }

// Encode is c as ParseClaimConfig reads it back: the annotation's value.
func (c ClaimConfig) Encode() string {
	b, _ := json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		ClaimConfig
	}{ClaimConfigAPIVersion, ClaimConfigKind, c})
	return string(b)
}

// ClaimConfigFromClaim checks what a claim's own configuration (not its
// DeviceClass's) may set: everything but smcr true, which who may use the
// class decides, and sharedLink, which decides what is made on a host
// NIC (a NIC holds ipvlan or macvlan children, never both: one pod's kind
// would keep the other's from the NIC).
func ClaimConfigFromClaim(c ClaimConfig) error {
	if c.SMCR != nil && *c.SMCR {
		return errField("smcr", "true may be set only in a DeviceClass's config: who may use the class decides who gets SMC-R (the pod annotation %s still works)", AnnotationSMCR)
	}
	if c.SharedLink != "" {
		return errField("sharedLink", "may be set only in a DeviceClass's config: it decides what is made on a host NIC")
	}
	return nil
}

// String is a short form for logs and messages.
func (c ClaimConfig) String() string {
	var parts []string
	if c.SMCR != nil {
		parts = append(parts, fmt.Sprintf("smcr=%t", *c.SMCR))
	}
	if c.IPv6 != nil {
		parts = append(parts, fmt.Sprintf("ipv6=%t", *c.IPv6))
	}
	if c.IfName != "" {
		parts = append(parts, "ifName="+c.IfName)
	}
	if c.SharedLink != "" {
		parts = append(parts, "sharedLink="+c.SharedLink)
	}
	return strings.Join(parts, " ")
}
