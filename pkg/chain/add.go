package chain

import (
	"context"
	"errors"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// add gives the pod its devices, or passes it through when it asked for
// none: the primary's result is then printed as it came.
func (p *Plugin) add(c *call) error {
	if c.conf.PrevResult == nil {
		return cniErrorf(types.ErrInvalidNetworkConfig, "rdma-chain must be chained after a primary plugin: no prevResult")
	}
	if _, warning := c.conf.SMCRFor(c.pod.Namespace); warning != "" {
		c.log.Warn(warning)
	}
	req, claims, err := p.podRequest(c)
	if err != nil {
		return err
	}
	if req == nil {
		return p.print(c.conf.PrevResult, c.conf.CNIVersion)
	}
	return p.attach(c, req, claims)
}

// attach runs ADD's three phases: under the node lock it selects the
// devices and makes the host changes (each recorded before it is made);
// without the lock it takes the IPAM leases and addresses the pod's
// interfaces; under the lock again it writes the SMC-R entries. On failure
// it releases the record as DEL would: what it names is undone and the
// record forgotten. It holds the attachment's key lock throughout: a DEL
// of the same attachment waits for it.
func (p *Plugin) attach(c *call, req *request, claims claimed) (err error) {
	unlockKey, err := c.lockKey()
	if err != nil {
		return err
	}
	defer unlockKey()
	result, mode, offered, err := p.prepareAttach(c)
	if err != nil {
		return err
	}
	offered, recClaims, err := applyClaims(c, req, claims, offered)
	if err != nil {
		return err
	}
	if c.podConf, err = claimPodConf(c, mode, claims.served, recClaims); err != nil {
		return err
	}
	draft := &draftRecord{Record: newRecord(c, mode)}
	draft.Claims = recClaims
	defer func() {
		if err != nil {
			p.rollback(c, draft)
		}
	}()
	att, err := p.attachLocked(c, draft, req, offered, result)
	if att.podNS != nil {
		defer att.podNS.Close()
	}
	p.finishReclaim(c, att.reclaimed)
	if err != nil {
		return err
	}
	leases, err := p.addressLinks(c, draft.Record, att.podNS)
	if err != nil {
		return err
	}
	if err := p.finishAttach(c, draft, att.devs, att.podNS); err != nil {
		return err
	}
	mergeLinks(c, draft.Record, result, linkOutputs{devs: att.devs, childMTU: att.childMTU, leases: leases})
	if draft.SMC != nil && !hasIPv4(result) {
		c.log.Warn("SMC-R does not do IPv6 and the pod has no IPv4 address: its connections will fall back to TCP")
	}
	c.log.Info("attached", "mode", draft.Mode, "links", len(draft.Links))
	return p.print(result, c.conf.CNIVersion)
}

// prepareAttach checks, before any change, what an ADD that attaches
// devices needs: a result it can print at the conf's version, a netns, and
// the node's RDMA mode and the devices this conf offers.
func (p *Plugin) prepareAttach(c *call) (*types100.Result, rdma.Mode, []rdma.Device, error) {
	result, err := c.conf.Result()
	if err != nil {
		return nil, "", nil, cniError(types.ErrDecodingFailure, "cannot convert prevResult", err)
	}
	if c.args.Netns == "" {
		return nil, "", nil, cniErrorf(types.ErrInvalidNetNS, "CNI_NETNS is required for a pod that needs RDMA")
	}
	if _, err := result.GetAsVersion(c.conf.CNIVersion); err != nil {
		return nil, "", nil, cniError(types.ErrIncompatibleCNIVersion, "cannot convert result to "+c.conf.CNIVersion, err)
	}
	mode, offered, err := p.nodeDevices(c)
	return result, mode, offered, err
}

// podRequest says what the pod asked for, or nil when it needs no RDMA or
// the network is draining, and the DRA claim devices kubelet reports for it.
func (p *Plugin) podRequest(c *call) (*request, claimed, error) {
	if c.conf.Drain {
		c.log.Info("network draining (drain: true): pod passed through")
		return nil, claimed{}, nil
	}
	if id := c.conf.RequestedDeviceID(); id != "" {
		return &request{source: "deviceID", ids: []string{id}}, claimed{}, nil
	}
	if c.conf.PodSelection == config.SelectAll {
		return &request{source: "podSelection all"}, claimed{}, nil
	}
	if c.pod.Name == "" {
		c.log.Debug("no K8S_POD_NAME in CNI_ARGS: cannot look up pod resources: passed through")
		return nil, claimed{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), podres.LookupBudget)
	defer cancel()
	q := podres.Query{ResourceNames: c.conf.ResourceNames, Drivers: c.conf.DRADrivers}
	pod, err := p.env.PodResources.Lookup(ctx, c.conf.PodResourcesSocket, c.pod.Namespace, c.pod.Name, q)
	if err != nil {
		return nil, claimed{}, kubeletUnanswered(c, err)
	}
	noteKubeletAnswered(c)
	req, cl := &request{source: "pod-resources"}, claimed{served: pod.Claims, foreign: pod.Foreign}
	for _, a := range pod.Devices {
		req.ids = append(req.ids, a.DeviceIDs...)
	}
	if len(req.ids) == 0 && len(cl.served) == 0 {
		logForeign(c, cl.foreign, "the pod asked this network for no RDMA device")
		logNoDevice(c, pod.Known)
		return nil, claimed{}, nil
	}
	return req, cl, nil
}

// logNoDevice says why a pod kubelet was asked about passes through: a
// pod kubelet does not know while its sandbox is made is not one kubelet
// made (a sandbox made by hand through CRI), or kubelet lost track of it.
func logNoDevice(c *call, known bool) {
	msg := "kubelet reports no RDMA device for the pod: passed through"
	if !known {
		msg = "kubelet does not know the pod: passed through without RDMA"
	}
	c.log.Info(msg, "resourceNames", c.conf.ResourceNames, "draDrivers", c.conf.DRADrivers)
}

// kubeletUnanswered is what ADD does when kubelet gave no answer. It
// returns error 11, so that the runtime retries the sandbox, or, with
// kubeletUnreachable passThrough and no kubelet at the socket, nothing, and
// the pod passes through without RDMA whatever it was allocated, which the
// log says. A kubelet that answers with an error, refuses or is slow is
// there and is always retried.
func kubeletUnanswered(c *call, err error) error {
	if c.conf.KubeletUnreachable == config.KubeletPassThrough && errors.Is(err, podres.ErrUnavailable) {
		c.log.Warn("kubelet pod-resources API unreachable: pod passed through without RDMA (kubeletUnreachable: passThrough)", "socket", c.conf.PodResourcesSocket, "error", err)
		return nil
	}
	return cniError(types.ErrTryAgainLater, kubeletUnansweredMessage(c.conf.PodResourcesSocket, err), err)
}

// nodeDevices reads the node's RDMA mode and the devices this conf offers
// the call's pod.
func (p *Plugin) nodeDevices(c *call) (rdma.Mode, []rdma.Device, error) {
	conf := c.conf
	mode, err := p.env.RDMA.NetnsMode()
	if err != nil {
		if errors.Is(err, rdma.ErrNoRDMA) {
			return "", nil, cniError(CodeNoRDMA, "pod needs RDMA but this node's kernel has no RDMA subsystem", err)
		}
		return "", nil, cniError(CodeNoRDMA, "cannot read the RDMA netns mode", err)
	}
	if conf.Mode != config.ModeAuto && conf.Mode != mode {
		return "", nil, cniErrorf(CodeModeMismatch, "configured mode %q differs from the kernel's RDMA netns mode %q (the plugin never switches it)", conf.Mode, mode)
	}
	if conf.PodSoftRoCE != "" {
		offered, err := p.softRoCEOffer(c, mode)
		return mode, offered, err
	}
	offered, err := p.offered(conf)
	return mode, offered, err
}

// offered lists the RDMA devices this conf offers.
func (p *Plugin) offered(conf *config.NetConf) ([]rdma.Device, error) {
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return nil, cniError(CodeNoRDMA, "cannot list RDMA devices", err)
	}
	return offeredDevices(all, conf.Devices), nil
}

func hasIPv4(r *types100.Result) bool {
	for _, ip := range r.IPs {
		if ip != nil && ip.Address.IP.To4() != nil {
			return true
		}
	}
	return false
}

func newRecord(c *call, mode rdma.Mode) *state.Record {
	return &state.Record{
		Network: c.conf.Name, ContainerID: c.args.ContainerID, IfName: c.args.IfName,
		NetNS: c.args.Netns, Mode: mode, CNIVersion: c.conf.CNIVersion,
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
