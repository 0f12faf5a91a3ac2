// Package config parses and validates the plugin's entry in a conflist, the
// runtime-provided runtimeConfig, CNI_ARGS and the pod annotations it reads.
// Everything a pod author can influence is parsed strictly; every invalid
// value is a CNI error with code 7 naming the field.
package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Defaults of the optional fields.
const (
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultDataDir            = "/var/lib/cni/rdma-chain"
	DefaultIfName             = "rdma"
	// AnnotationsCapability is the runtimeConfig key under which containerd
	// and CRI-O pass the pod's annotations.
	AnnotationsCapability = "io.kubernetes.cri.pod-annotations"
)

// Modes of the node's RDMA subsystem the plugin may be pinned to.
const (
	ModeAuto      = "auto"
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// Pod selection policies.
const (
	SelectRequested = "requested"
	SelectAll       = "all"
)

// Shared-mode link kinds.
const (
	LinkIPVlan  = "ipvlan"
	LinkMACVlan = "macvlan"
	LinkNone    = "none"
)

// SharedLink is the interface created in the pod in shared mode.
type SharedLink struct {
	Type string `json:"type,omitempty"`
	Mode string `json:"mode,omitempty"`
}

// SMCR configures the SMC-R pnet table written for annotated pods.
type SMCR struct {
	PnetID        string `json:"pnetId,omitempty"`
	UEID          string `json:"ueid,omitempty"`
	OnUnsupported string `json:"onUnsupported,omitempty"`
}

// RuntimeConfig holds the capability arguments the runtime injects.
type RuntimeConfig struct {
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
	DeviceID       string            `json:"deviceID,omitempty"`
}

// NetConf is the plugin's entry in the conflist.
type NetConf struct {
	types.PluginConf
	Mode               string     `json:"mode,omitempty"`
	Devices            []string   `json:"devices,omitempty"`
	PodSelection       string     `json:"podSelection,omitempty"`
	ResourceNames      []string   `json:"resourceNames,omitempty"`
	PodResourcesSocket string     `json:"podResourcesSocket,omitempty"`
	IfName             string     `json:"ifName,omitempty"`
	SharedLink         SharedLink `json:"sharedLink"`
	SMCR               SMCR       `json:"smcr"`
	DataDir            string     `json:"dataDir,omitempty"`
	LogFile            string     `json:"logFile,omitempty"`
	LogLevel           string     `json:"logLevel,omitempty"`
	DeviceID           string     `json:"deviceID,omitempty"`
	// DAD makes ADD wait for IPv6 duplicate address detection on the pod's
	// RDMA interfaces; off, addresses are added without DAD (the IPAM owns
	// uniqueness).
	DAD           bool            `json:"dad,omitempty"`
	RuntimeConfig RuntimeConfig   `json:"runtimeConfig"`
	RawIPAM       json.RawMessage `json:"-"`
	// LegacyAttachments is the pre-1.1 spelling of cni.dev/valid-attachments.
	LegacyAttachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`
}

// knownKeys are the top-level keys the plugin understands; anything else is
// reported as a warning, never an error.
var knownKeys = map[string]bool{
	"cniVersion": true, "cniVersions": true, "name": true, "type": true,
	"capabilities": true, "ipam": true, "dns": true, "prevResult": true,
	"runtimeConfig": true, "args": true, "cni.dev/valid-attachments": true,
	"cni.dev/attachments": true, "mode": true, "devices": true,
	"podSelection": true, "resourceNames": true, "podResourcesSocket": true,
	"ifName": true, "sharedLink": true, "smcr": true, "dataDir": true,
	"logFile": true, "logLevel": true, "deviceID": true, "dad": true,
}

// Parse decodes, defaults and validates the plugin configuration. It returns
// warnings for unknown keys. Errors are *types.Error with code 7.
func Parse(stdin []byte) (*NetConf, []string, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, nil, invalid("", "cannot decode network configuration: %v", err)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(stdin, &raw) // cannot fail after the decode above
	conf.RawIPAM = raw["ipam"]
	warnings := unknownKeys(raw)
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, warnings, invalid("prevResult", "%v", err)
	}
	conf.applyDefaults()
	if err := conf.validate(); err != nil {
		return nil, warnings, err
	}
	return conf, warnings, nil
}

func unknownKeys(raw map[string]json.RawMessage) []string {
	var out []string
	for k := range raw {
		if !knownKeys[k] {
			out = append(out, fmt.Sprintf("unknown configuration key %q ignored", k))
		}
	}
	sort.Strings(out)
	return out
}

func (c *NetConf) applyDefaults() {
	setDefault(&c.Mode, ModeAuto)
	setDefault(&c.PodSelection, SelectRequested)
	if c.ResourceNames == nil {
		c.ResourceNames = []string{"aliyun/erdma", "rdma/hca"}
	}
	setDefault(&c.PodResourcesSocket, DefaultPodResourcesSocket)
	setDefault(&c.IfName, DefaultIfName)
	setDefault(&c.SharedLink.Type, LinkIPVlan)
	switch c.SharedLink.Type {
	case LinkIPVlan:
		setDefault(&c.SharedLink.Mode, "l2")
	case LinkMACVlan:
		setDefault(&c.SharedLink.Mode, "bridge")
	}
	setDefault(&c.SMCR.OnUnsupported, "warn")
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.LogLevel, "info")
}

func setDefault(field *string, value string) {
	if *field == "" {
		*field = value
	}
}

// ValidAttachments merges the 1.1 and the older GC attachment lists.
func (c *NetConf) ValidAttachments() []types.GCAttachment {
	return append(append([]types.GCAttachment{}, c.PluginConf.ValidAttachments...), c.LegacyAttachments...)
}

// RequestedDeviceID is the device ID the runtime (Multus) asked for, if any:
// runtimeConfig wins over the top-level field.
func (c *NetConf) RequestedDeviceID() string {
	if c.RuntimeConfig.DeviceID != "" {
		return c.RuntimeConfig.DeviceID
	}
	return c.DeviceID
}

// HasIPAM reports whether the conf has an IPAM section for the pod's RDMA
// interfaces.
func (c *NetConf) HasIPAM() bool { return c.IPAM.Type != "" }

// PodIfName is the name of the pod's i-th RDMA interface.
func (c *NetConf) PodIfName(i int) string {
	return fmt.Sprintf("%s%d", c.IfName, i)
}

func invalid(field, format string, args ...any) *types.Error {
	msg := "invalid network configuration"
	if field != "" {
		msg = fmt.Sprintf("invalid network configuration: field %q", field)
	}
	return types.NewError(types.ErrInvalidNetworkConfig, msg, fmt.Sprintf(format, args...))
}

func absPath(field, p string, optional bool) error {
	if p == "" && optional {
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return invalid(field, "must be a clean absolute path, got %q", p)
	}
	return nil
}
