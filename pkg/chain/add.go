package chain

import (
	"context"
	"errors"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// podResourcesTimeout bounds the kubelet lookup on the ADD path.
const podResourcesTimeout = 2 * time.Second

func (p *Plugin) add(c *call) error {
	if c.conf.PrevResult == nil {
		return cniErrorf(types.ErrInvalidNetworkConfig, "rdma-chain must be chained after a primary plugin: no prevResult")
	}
	if _, warning := c.conf.SMCRRequested(); warning != "" {
		c.log.Warn(warning, "container", c.args.ContainerID)
	}
	req, err := p.podRequest(c)
	if err != nil || req == nil {
		if err == nil {
			c.log.Debug("pod needs no RDMA: passed through", "container", c.args.ContainerID)
			err = p.print(c.conf.PrevResult, c.conf.CNIVersion)
		}
		return err
	}
	result, err := types100.NewResultFromResult(c.conf.PrevResult)
	if err != nil {
		return cniError(types.ErrDecodingFailure, "cannot convert prevResult", err)
	}
	if c.args.Netns == "" {
		return cniErrorf(types.ErrInvalidNetNS, "CNI_NETNS is required for a pod that needs RDMA")
	}
	// Fail before any change if the result cannot be printed at this version.
	if _, err := result.GetAsVersion(c.conf.CNIVersion); err != nil {
		return cniError(types.ErrIncompatibleCNIVersion, "cannot convert result to "+c.conf.CNIVersion, err)
	}
	mode, offered, err := p.nodeDevices(c.conf)
	if err != nil {
		return err
	}
	rec, err := p.attachPod(c, req, mode, offered, result)
	if err != nil {
		return err
	}
	c.log.Info("attached", "container", c.args.ContainerID, "mode", rec.Mode, "links", len(rec.Links))
	return p.print(result, c.conf.CNIVersion)
}

// podRequest says what the pod asked for, or nil when it needs no RDMA.
func (p *Plugin) podRequest(c *call) (*request, error) {
	if id := c.conf.RequestedDeviceID(); id != "" {
		return &request{source: "deviceID", ids: []string{id}}, nil
	}
	if c.conf.PodSelection == config.SelectAll {
		return &request{source: "podSelection all"}, nil
	}
	if c.pod.Name == "" {
		c.log.Debug("no K8S_POD_NAME in CNI_ARGS: cannot look up pod resources")
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), podResourcesTimeout)
	defer cancel()
	client := p.env.PodResources(c.conf.PodResourcesSocket)
	allocs, err := client.Allocated(ctx, c.pod.Namespace, c.pod.Name, c.conf.ResourceNames)
	if err != nil {
		return nil, cniError(types.ErrTryAgainLater, "kubelet pod-resources API at "+c.conf.PodResourcesSocket+" did not answer", err)
	}
	req := &request{source: "pod-resources"}
	for _, a := range allocs {
		req.ids = append(req.ids, a.DeviceIDs...)
	}
	if len(req.ids) == 0 {
		return nil, nil
	}
	return req, nil
}

// nodeDevices reads the node's RDMA mode and the devices this conf offers.
func (p *Plugin) nodeDevices(conf *config.NetConf) (rdma.Mode, []rdma.Device, error) {
	mode, err := p.env.RDMA.NetnsMode()
	if err != nil {
		if errors.Is(err, rdma.ErrNoRDMA) {
			return "", nil, cniError(CodeNoRDMA, "pod needs RDMA but this node's kernel has no RDMA subsystem", err)
		}
		return "", nil, cniError(CodeNoRDMA, "cannot read the RDMA netns mode", err)
	}
	if conf.Mode != config.ModeAuto && conf.Mode != string(mode) {
		return "", nil, cniErrorf(CodeModeMismatch, "configured mode %q differs from the kernel's RDMA netns mode %q (the plugin never switches it)", conf.Mode, mode)
	}
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return "", nil, cniError(CodeNoRDMA, "cannot list RDMA devices", err)
	}
	return mode, offeredDevices(all, conf.Devices), nil
}

// attachPod selects the devices under the node lock and attaches them.
func (p *Plugin) attachPod(c *call, req *request, mode rdma.Mode, offered []rdma.Device, result *types100.Result) (*state.Record, error) {
	unlock, err := c.store.Lock()
	if err != nil {
		return nil, cniError(CodeState, "cannot lock attachment state", err)
	}
	defer unlock()
	if _, err := c.store.Get(c.key()); !errors.Is(err, state.ErrNotFound) {
		if err == nil {
			return nil, cniErrorf(CodeState, "attachment %s/%s is already recorded: DEL it first", c.args.ContainerID, c.args.IfName)
		}
		return nil, cniError(CodeState, "cannot read attachment state", err)
	}
	busy, err := busyDevices(c.store, c.conf.Devices)
	if err != nil {
		return nil, cniError(CodeState, "cannot read attachment state", err)
	}
	devs, err := selectDevices(req, selectInput{mode: mode, offered: offered, busy: busy, macs: resultMACs(result),
		needNetdev: c.conf.SharedLink.Type != config.LinkNone})
	if err != nil {
		return nil, err
	}
	rec := newRecord(c, mode)
	if err := p.attach(c, rec, devs); err != nil {
		return nil, err
	}
	mergeLinks(c, rec, result)
	if rec.SMC != nil && !hasIPv4(result) {
		c.log.Warn("SMC-R does not do IPv6 and the pod has no IPv4 address: its connections will fall back to TCP", "container", c.args.ContainerID)
	}
	return rec, nil
}

func hasIPv4(r *types100.Result) bool {
	for _, ip := range r.IPs {
		if ip.Address.IP.To4() != nil {
			return true
		}
	}
	return false
}

func newRecord(c *call, mode rdma.Mode) *state.Record {
	return &state.Record{
		Network: c.conf.Name, ContainerID: c.args.ContainerID, IfName: c.args.IfName,
		NetNS: c.args.Netns, Mode: string(mode), CNIVersion: c.conf.CNIVersion,
		Pod:       state.Pod{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID},
		CreatedAt: time.Now().UTC(),
	}
}

// print writes result to stdout at the conf's CNI version.
func (p *Plugin) print(result types.Result, cniVersion string) error {
	r, err := result.GetAsVersion(cniVersion)
	if err != nil {
		return cniError(types.ErrIncompatibleCNIVersion, "cannot convert result to "+cniVersion, err)
	}
	return r.PrintTo(p.env.Stdout)
}
