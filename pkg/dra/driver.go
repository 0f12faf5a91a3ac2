package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// Driver prepares claims for the kubelet plugin helper: it implements
// kubeletplugin.DRAPlugin.
type Driver struct {
	NodeName string // the pool's name: one pool, one ResourceSlice per node
	SysRoot  string
	CDIDir   string
	Log      *slog.Logger
	// OnFatal is called for a background error the helper cannot recover
	// from (a slice the API refuses): the process ends and restarts.
	OnFatal func(error)

	mu      sync.Mutex
	node    *Node          // the last discovery
	invalid invalidConfigs // claims whose configuration Prepare refused
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// SetNode replaces the discovery claims are prepared from.
func (d *Driver) SetNode(n *Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.node = n
}

func (d *Driver) nic(draName string) (NIC, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.node == nil {
		return NIC{}, false
	}
	for _, n := range d.node.NICs {
		if n.DRAName == draName {
			return n, true
		}
	}
	return NIC{}, false
}

// invalidConfigStatuses are the status.devices entries of the claims
// whose configuration Prepare refused, for the StatusWriter.
func (d *Driver) invalidConfigStatuses() map[claimRef][]deviceStatus { return d.invalid.statuses() }

func (d *Driver) specs() cdiSpecs { return cdiSpecs{dir: d.CDIDir} }

// PrepareResourceClaims gives each claim's containers exactly the character
// devices of the RDMA devices allocated from this node's pool, and the
// plugin each device's configuration (claimConfigs). A claim prepared
// before (kubelet asks again after its restart, or after this driver's)
// is answered from its CDI spec on disk, unchanged. A claim whose
// configuration is refused is kept for its status (invalidConfigStatuses).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.prepare(c)
		d.invalid.note(c, d.NodeName, err)
		if err != nil {
			d.Log.Warn("cannot prepare claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "error", err)
		} else {
			d.Log.Info("prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", len(devs))
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
	}
	return out, nil
}

// prepare writes (or reads back) the CDI spec of claim.
func (d *Driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	uid := string(claim.UID)
	prepared, err := d.specs().read(uid)
	if err != nil {
		return nil, err
	}
	var cfgs map[int]config.ClaimConfig
	if prepared == nil {
		if cfgs, err = claimConfigs(claim); err != nil {
			return nil, err
		}
	}
	var out []kubeletplugin.Device
	var specDevs []cdiDevice
	for i, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != d.NodeName {
			continue
		}
		name := cdiName(uid, r.Device)
		out = append(out, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{cdiID(name)}, ShareID: r.ShareID})
		if prepared != nil {
			if !slices.Contains(prepared, name) {
				return nil, fmt.Errorf("claim %s/%s: its CDI spec has no device %s", claim.Namespace, claim.Name, name)
			}
			continue
		}
		nic, ok := d.nic(r.Device)
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: device %s is not an RDMA device of node %s", claim.Namespace, claim.Name, r.Device, d.NodeName)
		}
		dev, err := d.cdiDevice(name, nic)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		dev.annotations = configAnnotations(cfgs[i])
		specDevs = append(specDevs, dev)
	}
	if prepared == nil && len(specDevs) > 0 {
		if err := d.specs().write(uid, specDevs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SoftRoCEEnv is the variable a soft-RoCE NIC's CDI device sets in the
// container: the host's NIC (the pod's own interface is its child). It is the device's one edit when the node
// has no rdma_cm, since a CDI device without edits is invalid.
const SoftRoCEEnv = "RDMA_CHAIN_SOFTROCE_HOST_NIC"

// cdiDevice is the CDI device called name of nic: its character devices.
// A soft-RoCE NIC's has rdma_cm alone, when the node has it, and
// SoftRoCEEnv: the pod's own rxe device, with its uverbs, is made at the
// sandbox's CNI ADD, after Prepare, so only a privileged container, which
// sees the node's /dev, reaches its verbs device.
func (d *Driver) cdiDevice(name string, nic NIC) (cdiDevice, error) {
	if nic.SoftRoCE {
		return cdiDevice{name: name, nodes: rdmaCM(d.sysRoot()), env: []string{SoftRoCEEnv + "=" + nic.Netdev}}, nil
	}
	nodes := CharDevices(d.sysRoot(), nic.Name)
	if !hasVerbs(nodes) {
		return cdiDevice{}, fmt.Errorf("RDMA device %s has no uverbs character device (ib_uverbs not loaded?)", nic.Name)
	}
	return cdiDevice{name: name, nodes: nodes}, nil
}

// UnprepareResourceClaims removes each claim's CDI spec, and forgets a
// refused configuration of it; a claim never prepared, or already
// unprepared, is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		d.invalid.drop(c.UID)
		out[c.UID] = d.specs().remove(string(c.UID))
		d.Log.Info("unprepared claim", "claim", c.String(), "uid", c.UID, "error", out[c.UID])
	}
	return out, nil
}

// HandleError logs background errors; one the helper cannot recover from
// ends the process through OnFatal.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.Log.Error(msg, "error", err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.OnFatal != nil {
		d.OnFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus reports no device health to kubelet: a port's state
// is an attribute of the slice, and an unhealthy device a taint there
// (health.go).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *Driver) sysRoot() string {
	if d.SysRoot == "" {
		return "/sys"
	}
	return d.SysRoot
}

func hasVerbs(nodes []string) bool {
	for _, n := range nodes {
		if strings.HasPrefix(n, "/dev/infiniband/uverbs") {
			return true
		}
	}
	return false
}
