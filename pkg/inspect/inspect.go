package inspect

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Report is what inspect found. Every part it could not read is named in
// Unreadable with the reason; nothing is left out silently.
type Report struct {
	// SchemaVersion is the version of this JSON schema (docs/operations.md):
	// it grows when a field changes meaning or goes; new fields keep it.
	SchemaVersion int          `json:"schemaVersion"`
	RDMA          RDMAReport   `json:"rdma"`
	SMC           SMCReport    `json:"smc"`
	Attachments   []Attachment `json:"attachments"`
	Failures      []Failure    `json:"lastFailures"`
	Netns         *NetnsReport `json:"netns,omitempty"`
	Unreadable    []Unreadable `json:"unreadable,omitempty"`
}

// RDMAReport is the node's RDMA subsystem as this netns sees it.
type RDMAReport struct {
	Mode    rdma.Mode `json:"mode,omitempty"`
	Devices []Device  `json:"devices"`
	// PodSoftRoCE says whether this kernel can give pods soft-RoCE
	// devices of their own (podSoftRoCE); PodSoftRoCEReason why not.
	PodSoftRoCE       bool   `json:"podSoftRoCE"`
	PodSoftRoCEReason string `json:"podSoftRoCEReason,omitempty"`
}

// Device is one RDMA device.
type Device struct {
	Name     string      `json:"name"`
	Driver   string      `json:"driver,omitempty"`
	Netdev   string      `json:"netdev,omitempty"`
	PCI      string      `json:"pci,omitempty"`
	NodeGUID string      `json:"nodeGUID,omitempty"`
	Netns    string      `json:"netns"`
	Ports    []rdma.Port `json:"ports,omitempty"`
}

// PnetRow is one pnet table entry.
type PnetRow struct {
	PnetID string `json:"pnetId"`
	Eth    string `json:"eth,omitempty"`
	IB     string `json:"ib,omitempty"`
	IBPort uint8  `json:"ibPort,omitempty"`
}

// SMCReport is SMC as init_net (or the netns inspected) has it.
type SMCReport struct {
	Available bool      `json:"available"`
	Reason    string    `json:"reason,omitempty"` // why not available
	Pnet      []PnetRow `json:"pnet"`
	UEIDs     []string  `json:"ueids,omitempty"`
	// Transparent is the mechanism smcr.transparent auto (the default)
	// uses on this node; Offer is what the kernel offers for it.
	Transparent smc.Mechanism `json:"transparent"`
	Offer       smc.Offer     `json:"offer"`
	// Hook is the transparent-SMC socket hook, when attached or pinned.
	Hook *HookReport `json:"socketHook,omitempty"`
}

// HookReport is the BPF socket hook of smcr.transparent "bpf": whether its
// program is attached, whether the reconcile daemon holds it attached
// between pods, and the pod netns (by inode) it switches to SMC.
type HookReport struct {
	Attached bool     `json:"attached"`
	Held     bool     `json:"held"`
	Netns    []uint32 `json:"netnsInodes"`
}

// Attachment is one recorded attachment and whether it is still whole.
type Attachment struct {
	Network     string      `json:"network"`
	ContainerID string      `json:"containerID"`
	IfName      string      `json:"ifName"`
	Pod         string      `json:"pod,omitempty"`
	Mode        string      `json:"mode"`
	NetNS       string      `json:"netns,omitempty"`
	Created     time.Time   `json:"created"`
	Links       []LinkState `json:"links,omitempty"`
	SMCR        string      `json:"smcr,omitempty"`
	Healthy     bool        `json:"healthy"`
	Problems    []string    `json:"problems,omitempty"`
	DataDir     string      `json:"dataDir"`
	// Usage is what the pod's processes hold per RDMA device (usage.go).
	Usage []DeviceUsage `json:"rdmaUsage,omitempty"`
}

// LinkState is one recorded link.
type LinkState struct {
	Device  string         `json:"device"`
	Kind    state.LinkKind `json:"kind"`
	PodName string         `json:"podName,omitempty"`
	Host    string         `json:"host,omitempty"`
	IPs     []string       `json:"ips,omitempty"`
	Step    state.Step     `json:"step"`
	// SoftRoCE says that Device is the pod's own rxe device on PodName
	// (podSoftRoCE), made in the pod netns.
	SoftRoCE bool `json:"softRoCE,omitempty"`
}

// Failure is a pod's last failed CNI call, and its last call since.
type Failure struct {
	outcome.Entry
	Since   string `json:"since,omitempty"` // verb and result of a later call
	DataDir string `json:"dataDir"`
}

// Unreadable names something inspect could not read, and why.
type Unreadable struct {
	What  string `json:"what"`
	Error string `json:"error"`
}

// ReportSchemaVersion is the schema version inspect --json prints.
const ReportSchemaVersion = 1

type inspector struct {
	k        reader
	usage    rdmares.Reader // nil: usage is not read
	dataDirs []string
	r        Report
	recs     []*state.Record // every record read
}

// Options say what Run inspects.
type Options struct {
	// Netns is a netns to show as well ("": none).
	Netns string
	// DataDirs are state directories; Conflists name more through their
	// rdma-chain entries. Without either, the entries of the conflists in
	// ConfDir name them, and config.DefaultDataDir without any.
	DataDirs, Conflists []string
	ConfDir             string
}

// Run inspects the node as o says, read-only. It fails only when a
// conflist named in o cannot be read; everything else it could not read is
// in the report's Unreadable.
func Run(o Options) (Report, error) {
	dirs, conflists := slices.Clone(o.DataDirs), slices.Clone(o.Conflists)
	var skipped []error
	if len(dirs) == 0 && len(conflists) == 0 {
		nets, sk, err := conflist.Discover(o.ConfDir)
		for _, n := range nets {
			conflists = append(conflists, n.Path)
		}
		skipped = sk
		if err != nil {
			skipped = append(skipped, err)
		}
	}
	for _, c := range conflists {
		n, err := conflist.FromFile(c)
		if err != nil {
			return Report{}, err
		}
		if !slices.Contains(dirs, n.DataDir) {
			dirs = append(dirs, n.DataDir)
		}
	}
	if len(dirs) == 0 {
		dirs = []string{config.DefaultDataDir}
	}
	in := &inspector{k: newKernelReader(), usage: rdmares.NewKernel(), dataDirs: dirs}
	r := in.inspect(o.Netns)
	for _, e := range skipped {
		r.Unreadable = append(r.Unreadable, Unreadable{What: "conflists in " + o.ConfDir, Error: e.Error()})
	}
	return r, nil
}

// Problems reports whether r found anything wrong: something it could not
// read or an attachment that is not whole.
func (r Report) Problems() bool {
	return len(r.Unreadable) > 0 || slices.ContainsFunc(r.Attachments, func(a Attachment) bool { return !a.Healthy })
}

func (in *inspector) unreadable(what string, err error) {
	in.r.Unreadable = append(in.r.Unreadable, Unreadable{What: what, Error: err.Error()})
}

func (in *inspector) inspect(nsPath string) Report {
	in.r = Report{SchemaVersion: ReportSchemaVersion, Attachments: []Attachment{}, Failures: []Failure{}}
	in.readRDMA()
	in.readSMC()
	for _, dir := range in.dataDirs {
		in.readAttachments(dir)
		in.readFailures(dir)
	}
	if in.usage != nil {
		in.readUsage(in.recs)
	}
	if nsPath != "" {
		in.readNetns(nsPath)
	}
	return in.r
}

func (in *inspector) readRDMA() {
	mode, err := in.k.NetnsMode()
	if err != nil {
		in.unreadable("RDMA netns mode", err)
	}
	in.r.RDMA.Mode = mode
	in.r.RDMA.PodSoftRoCEReason = in.k.SoftRoCEUnsupported()
	in.r.RDMA.PodSoftRoCE = in.r.RDMA.PodSoftRoCEReason == ""
	devs, err := in.k.Devices()
	if err != nil {
		in.unreadable("RDMA devices", err)
	}
	in.r.RDMA.Devices = []Device{}
	for _, d := range devs {
		dev := Device{Name: d.Name, Driver: d.Driver, Netdev: d.Netdev, PCI: d.PCI, NodeGUID: d.NodeGUID, Netns: "host"}
		ports, err := in.k.Ports(d.Name)
		if err != nil {
			in.unreadable("ports of RDMA device "+d.Name, err)
		}
		dev.Ports = ports
		in.r.RDMA.Devices = append(in.r.RDMA.Devices, dev)
	}
}

func (in *inspector) readSMC() {
	in.r.SMC.Pnet = []PnetRow{}
	in.r.SMC.Offer = in.k.SMCOffer()
	in.r.SMC.Transparent = in.r.SMC.Offer.Uses(config.TransparentAuto)
	pnet, err := in.k.Pnet("")
	if errors.Is(err, smc.ErrUnavailable) {
		in.r.SMC.Reason = err.Error()
		return
	}
	in.r.SMC.Available = true
	if err != nil {
		in.unreadable("init_net pnet table", err)
	}
	in.r.SMC.Pnet = pnetRows(pnet)
	if in.r.SMC.UEIDs, err = in.k.UEIDs(); err != nil {
		in.unreadable("SMC UEIDs", err)
	}
	hook, err := in.k.SocketHook()
	if err != nil {
		in.unreadable("SMC socket hook pins", err)
	}
	if hook.Attached || hook.Held || len(hook.Listed) > 0 {
		in.r.SMC.Hook = &HookReport{Attached: hook.Attached, Held: hook.Held, Netns: hook.Listed}
	}
}

func pnetRows(list []smc.PnetEntry) []PnetRow {
	out := []PnetRow{}
	for _, e := range list {
		out = append(out, PnetRow{PnetID: e.PnetID, Eth: e.EthName, IB: e.IBName, IBPort: e.IBPort})
	}
	return out
}

// readAttachments lists the records without the node lock: records are
// replaced atomically, so a read sees a whole record, old or new.
func (in *inspector) readAttachments(dir string) {
	recs, err := state.New(dir).List()
	if err != nil {
		in.unreadable("attachment records in "+dir, err)
	}
	in.recs = append(in.recs, recs...)
	for _, rec := range recs {
		in.r.Attachments = append(in.r.Attachments, in.attachment(dir, rec))
	}
}

func (in *inspector) readFailures(dir string) {
	entries, err := outcome.Read(dir)
	if err != nil {
		in.unreadable("outcome log in "+dir, err)
	}
	in.r.Failures = append(in.r.Failures, lastFailures(entries, dir)...)
}

// lastFailures is each pod's last failure, with the pod's last call after it.
func lastFailures(entries []outcome.Entry, dir string) []Failure {
	var out []Failure
	index := map[string]int{}
	for _, e := range entries {
		key := e.Pod + "\x00" + e.ContainerID
		if e.Pod != "" {
			key = e.Pod
		}
		if e.Failed() {
			index[key] = len(out)
			out = append(out, Failure{Entry: e, DataDir: dir})
			continue
		}
		if i, ok := index[key]; ok {
			out[i].Since = fmt.Sprintf("%s ok at %s", e.Verb, e.Time.UTC().Format(time.RFC3339))
		}
	}
	kept := out[:0]
	for i, f := range out {
		key := f.Pod + "\x00" + f.ContainerID
		if f.Pod != "" {
			key = f.Pod
		}
		if index[key] == i {
			kept = append(kept, f)
		}
	}
	return kept
}

var errNoNetns = errors.New("no netns recorded")
