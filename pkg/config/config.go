package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"

	"github.com/containernetworking/cni/pkg/types"
)

// SupportedVersions are the CNI spec versions the plugin serves.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Defaults of the optional fields.
const (
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultDataDir            = "/var/lib/cni/rdma-chain"
	DefaultIfName             = "rdma"
	// DefaultCDIDir is where rdma-chain-dra writes each prepared claim's
	// CDI spec (its --cdi-dir).
	DefaultCDIDir = "/var/run/cdi"
	// DefaultDRADriver is the DRA driver name of rdma-chain-dra (pkg/dra),
	// served by default.
	DefaultDRADriver = "rdma-chain.github.io"
	// AnnotationsCapability is the runtimeConfig key under which containerd
	// and CRI-O pass the pod's annotations.
	AnnotationsCapability = "io.kubernetes.cri.pod-annotations"
	// DeviceInfoCapability is the runtimeConfig key under which Multus
	// passes the path of the NPWG device-info file to write.
	DeviceInfoCapability = "CNIDeviceInfoFile"
)

// Modes of the node's RDMA subsystem the plugin may be pinned to: auto
// or one of the kernel's.
const (
	ModeAuto      rdma.Mode = "auto"
	ModeExclusive           = rdma.ModeExclusive
	ModeShared              = rdma.ModeShared
)

// Pod selection policies.
const (
	SelectRequested = "requested"
	SelectAll       = "all"
)

// What ADD does with podSelection requested when kubelet's pod-resources
// socket cannot be reached (missing, refused, or no answer in time).
const (
	KubeletRetry       = "retry"       // error 11: the runtime retries the sandbox
	KubeletPassThrough = "passThrough" // the pod gets the primary's result, no RDMA
)

// Shared-mode link kinds, the sharedLink.type values: those a record
// keeps (SharedLink.Kind).
const (
	LinkIPVlan  = string(state.LinkIPVlan)
	LinkMACVlan = string(state.LinkMACVlan)
	LinkNone    = string(state.LinkNone)
)

// SharedLink is the interface created in the pod in shared mode.
type SharedLink struct {
	Type string `json:"type,omitempty"`
	Mode string `json:"mode,omitempty"`
}

// DefaultSharedLinkMode is the mode a sharedLink of type t gets when none
// is given: l2 for ipvlan, bridge for macvlan, none for none.
func DefaultSharedLinkMode(t string) string {
	switch t {
	case LinkIPVlan:
		return "l2"
	case LinkMACVlan:
		return "bridge"
	}
	return ""
}

// Kind is Type as a record keeps it; validate has checked it is one.
func (s SharedLink) Kind() state.LinkKind { return state.LinkKind(s.Type) }

// SMCR configures the SMC-R pnet table written for annotated pods.
type SMCR struct {
	PnetID        string `json:"pnetId,omitempty"`
	UEID          string `json:"ueid,omitempty"`
	OnUnsupported string `json:"onUnsupported,omitempty"`
	// Transparent picks how an annotated pod's TCP sockets become SMC
	// sockets: auto | tcp2smc | bpf | off.
	Transparent string `json:"transparent,omitempty"`
	// BPFFSDir is the bpffs directory of the socket hook's pins.
	BPFFSDir string `json:"bpffsDir,omitempty"`
	// Enabled false turns SMC-R off on this network: the annotation is
	// then ignored with a warning. Absent means true.
	Enabled *bool `json:"enabled,omitempty"`
	// Namespaces, when set, lists the only Kubernetes namespaces whose pods
	// the annotation serves; absent means every namespace.
	Namespaces []string `json:"namespaces,omitempty"`
}

// How an annotated pod's TCP sockets become SMC sockets.
const (
	TransparentAuto    = "auto"    // tcp2smc where the sysctl exists, else bpf where the kernel can, else none
	TransparentTCP2SMC = "tcp2smc" // Alibaba Cloud Linux 3's net.smc.tcp2smc
	TransparentBPF     = "bpf"     // IPPROTO_SMC through the update_socket_protocol hook
	TransparentOff     = "off"
	DefaultBPFFSDir    = "/sys/fs/bpf/rdma-chain"
)

// RuntimeConfig holds the capability arguments the runtime injects.
type RuntimeConfig struct {
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
	DeviceID       string            `json:"deviceID,omitempty"`
	DeviceInfoFile string            `json:"CNIDeviceInfoFile,omitempty"`
}

// NetConf is the plugin's entry in the conflist. Parse fills it key by key
// (see fields.go); the JSON tags only serve encoding.
type NetConf struct {
	types.PluginConf
	Mode               rdma.Mode `json:"mode,omitempty"`
	Devices            []string  `json:"devices,omitempty"`
	PodSelection       string    `json:"podSelection,omitempty"`
	ResourceNames      []string  `json:"resourceNames,omitempty"`
	DRADrivers         []string  `json:"draDrivers,omitempty"`
	PodResourcesSocket string    `json:"podResourcesSocket,omitempty"`
	// CDIDir is where ADD reads the CDI spec of each claim of
	// DefaultDRADriver, for the claim's configuration (ClaimConfig).
	CDIDir             string     `json:"cdiDir,omitempty"`
	KubeletUnreachable string     `json:"kubeletUnreachable,omitempty"`
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
	DAD bool `json:"dad,omitempty"`
	// ReportIPs lists the RDMA interfaces' IPAM addresses (and their routes
	// other than default routes) in the result; off, the result gains only
	// the RDMA interface entries (docs/chaining.md says why).
	ReportIPs bool `json:"reportIPs,omitempty"`
	// PodIPv6Block derives each pod's IPv6 on each RDMA interface from the
	// device's netdev's global /64 and these host bits (see PodBlock).
	PodIPv6Block string `json:"podIPv6Block,omitempty"`
	// PodSoftRoCE names the host NIC (without an RDMA device) whose
	// macvlan child each RDMA pod gets, with a soft-RoCE (rxe) device of
	// its own on that child, made in the pod's netns (Linux >= 7.1, shared
	// RDMA netns mode). Empty: the pods share the node's RDMA devices.
	PodSoftRoCE string `json:"podSoftRoCE,omitempty"`
	// NodeAddresses are the node's own addresses as the cluster knows them
	// (kubelet's InternalIPs, which --node-ip may put on a netdev no
	// default route uses): exclusive mode never moves a netdev holding one.
	NodeAddresses []string `json:"nodeAddresses,omitempty"`
	// Drain passes every new pod through (no attachment) while the
	// attachments recorded before are still checked and given back on DEL
	// and GC: what uninstall sets until the pods that hold one are gone.
	Drain         bool            `json:"drain,omitempty"`
	RuntimeConfig RuntimeConfig   `json:"runtimeConfig"`
	RawIPAM       json.RawMessage `json:"-"`
	// LegacyAttachments is the pre-1.1 spelling of cni.dev/valid-attachments.
	LegacyAttachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	// known holds the top-level keys Parse used, exactly as given.
	known map[string]json.RawMessage
}

// Parse decodes, defaults and validates the plugin configuration. It returns
// warnings for ignored keys. Errors are *types.Error: code 7 for the
// configuration, 6 for prevResult, 1 for an unsupported cniVersion.
func Parse(stdin []byte) (*NetConf, []string, error) {
	w := &warnings{}
	conf, err := parseConf(stdin, w, true)
	return conf, w.list(), err
}

// ParseWithoutPrevResult is Parse for the verbs that never read prevResult
// (DEL, GC, STATUS): the prevResult is dropped, with a warning when it is
// invalid, so that a bad result from the previous plugin, which the runtime
// resends on every retry, cannot make a DEL fail forever.
func ParseWithoutPrevResult(stdin []byte) (*NetConf, []string, error) {
	w := &warnings{}
	conf, err := parseConf(stdin, w, false)
	return conf, w.list(), err
}

func parseConf(stdin []byte, w *warnings, withPrev bool) (*NetConf, error) {
	top, err := decodeObject(stdin)
	if err != nil {
		return nil, invalid("", "cannot decode network configuration: %v", err)
	}
	conf := &NetConf{}
	conf.known, err = decodeFields("", top, conf.topFields(), w)
	if err != nil {
		return nil, asCNI(types.ErrInvalidNetworkConfig, err)
	}
	if err := checkVersion(conf.CNIVersion); err != nil {
		return nil, err
	}
	if err := conf.parsePrevResult(conf.known["prevResult"], w); err != nil {
		if withPrev {
			return nil, asCNI(types.ErrDecodingFailure, err)
		}
		w.add("prevResult ignored: %v", err)
	}
	if !withPrev {
		conf.PrevResult, conf.RawPrevResult = nil, nil
	}
	conf.applyDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	return conf, nil
}

func checkVersion(v string) error {
	if v == "" {
		return invalid("cniVersion", "is required")
	}
	if !slices.Contains(SupportedVersions, v) {
		return types.NewError(types.ErrIncompatibleCNIVersion, `incompatible CNI version: field "cniVersion"`,
			fmt.Sprintf("%q is not one of %v", truncate(v), SupportedVersions))
	}
	return nil
}

func (c *NetConf) applyDefaults() {
	setDefault(&c.Mode, ModeAuto)
	setDefault(&c.PodSelection, SelectRequested)
	if c.ResourceNames == nil {
		c.ResourceNames = []string{"aliyun/erdma", "rdma/hca"}
	}
	if c.DRADrivers == nil {
		c.DRADrivers = []string{DefaultDRADriver}
	}
	setDefault(&c.PodResourcesSocket, DefaultPodResourcesSocket)
	setDefault(&c.CDIDir, DefaultCDIDir)
	setDefault(&c.KubeletUnreachable, KubeletRetry)
	setDefault(&c.IfName, DefaultIfName)
	if c.PodSoftRoCE != "" {
		// Each pod's rxe device needs a MAC of its own (see validateSoftRoCE).
		setDefault(&c.SharedLink.Type, LinkMACVlan)
	}
	setDefault(&c.SharedLink.Type, LinkIPVlan)
	setDefault(&c.SharedLink.Mode, DefaultSharedLinkMode(c.SharedLink.Type))
	setDefault(&c.SMCR.OnUnsupported, "warn")
	setDefault(&c.SMCR.Transparent, TransparentAuto)
	setDefault(&c.SMCR.BPFFSDir, DefaultBPFFSDir)
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.LogLevel, "info")
}

func setDefault[T ~string](field *T, value T) {
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

// IPAMStdin is the configuration to hand a delegated IPAM plugin: the
// top-level keys Parse used, exactly as given, and nothing it ignored, so the
// IPAM's case-insensitive decoder cannot pick up a key logged as ignored
// (an "IPAM" beside "ipam").
func (c *NetConf) IPAMStdin() ([]byte, error) {
	return json.Marshal(c.known)
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
		return invalid(field, "must be a clean absolute path, got %q", truncate(p))
	}
	return nil
}

// truncateLong shortens a message part that may quote a whole input.
func truncateLong(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// truncate shortens a value quoted in a message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
