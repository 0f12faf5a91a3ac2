package chain

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// check verifies the recorded attachment against the pod netns and the
// chain's result. A pod passed through has no record and nothing to verify.
func (p *Plugin) check(c *call) error {
	if c.conf.PrevResult == nil {
		return cniErrorf(types.ErrInvalidNetworkConfig, "CHECK needs prevResult")
	}
	rec, err := p.readRecord(c, false)
	if err != nil || rec == nil {
		return err
	}
	result, err := c.conf.Result()
	if err != nil {
		return cniError(types.ErrDecodingFailure, "cannot convert prevResult", err)
	}
	for _, l := range rec.Links {
		if err := p.checkLink(c, rec, l, result); err != nil {
			return cniError(CodeCheckFailed, fmt.Sprintf("RDMA link %s of device %s", l.PodName, l.Device), err)
		}
	}
	if err := p.checkSMC(c, rec); err != nil {
		return cniError(CodeCheckFailed, "SMC-R pnet table", err)
	}
	return nil
}

func (p *Plugin) checkLink(c *call, rec *state.Record, l state.Link, result *types100.Result) error {
	if l.Step != stepDone {
		return fmt.Errorf("attachment incomplete (step %s)", l.Step)
	}
	if l.RDMAMoved {
		in, err := p.env.RDMA.InNetns(l.Device, c.args.Netns)
		if err != nil {
			return err
		}
		if !in {
			return fmt.Errorf("RDMA device %s is not in the pod netns", l.Device)
		}
	}
	if l.PodName == "" {
		return nil
	}
	if !hasInterface(result, l.PodName, c.args.Netns) {
		return fmt.Errorf("interface %s missing from the result", l.PodName)
	}
	return p.env.Links.CheckInPod(c.args.Netns, l.PodName, l.MAC)
}

func hasInterface(r *types100.Result, name, sandbox string) bool {
	for _, i := range r.Interfaces {
		if i != nil && i.Name == name && i.Sandbox == sandbox {
			return true
		}
	}
	return false
}

// status reports whether the plugin can serve ADD.
func (p *Plugin) status(c *call) error {
	if err := c.store.Writable(); err != nil {
		return cniError(CodeNotAvailable, "state directory "+c.conf.DataDir+" is not writable", err)
	}
	if c.conf.PodSelection != config.SelectRequested || c.conf.Drain {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), podres.DefaultTimeout)
	defer cancel()
	err := p.env.PodResources.Probe(ctx, c.conf.PodResourcesSocket)
	if err == nil {
		return nil
	}
	// With passThrough ADD serves pods without kubelet: the node stays ready.
	if c.conf.KubeletUnreachable == config.KubeletPassThrough && errors.Is(err, podres.ErrUnavailable) {
		c.log.Warn("kubelet pod-resources API unreachable: ADD passes pods through without RDMA (kubeletUnreachable: passThrough)",
			"socket", c.conf.PodResourcesSocket, "error", err)
		return nil
	}
	return cniError(CodeNotAvailable, "kubelet pod-resources API at "+c.conf.PodResourcesSocket+" is not reachable", err)
}
