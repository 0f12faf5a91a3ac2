package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
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
	if l.Step != state.StepDone {
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
	if err := p.checkSoftRoCE(l); err != nil {
		return err
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

// status reports whether the plugin can serve ADD and, where the network
// serves SMC-R, logs which transparent-SMC mechanism annotated pods get.
func (p *Plugin) status(c *call) error {
	if err := c.store.Writable(); err != nil {
		return cniError(CodeNotAvailable, "state directory "+c.conf.DataDir+" is not writable", err)
	}
	if c.conf.Drain {
		return nil // new pods pass through: neither kubelet nor SMC serves them
	}
	if err := p.statusKubelet(c); err != nil {
		return err
	}
	p.statusSMC(c)
	p.statusSoftRoCE(c)
	return nil
}

// statusKubelet checks the kubelet for STATUS: a network that asks kubelet which pods want RDMA is ready
// while a kubelet serves the socket, unless ADD passes pods through
// without it. A kubelet that answered recently (a lookup or probe noted in
// the state directory) is not asked again: STATUS only checks that the
// socket still accepts connections, which costs none of kubelet's rate
// limit. One that refuses (its rate limit) or answers late is there, and
// ADD waits for it: the node stays ready, since STATUS failing stops every
// pod's sandbox, those without RDMA too.
func (p *Plugin) statusKubelet(c *call) error {
	if c.conf.PodSelection != config.SelectRequested {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), podres.DefaultTimeout)
	defer cancel()
	var err error
	if kubeletAnsweredWithin(c, kubeletAnsweredMaxAge) {
		err = p.env.PodResources.Serving(ctx, c.conf.PodResourcesSocket)
	} else if err = p.env.PodResources.Probe(ctx, c.conf.PodResourcesSocket); err == nil {
		noteKubeletAnswered(c)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, podres.ErrBusy) {
		c.log.Warn("kubelet pod-resources API busy: ADD waits for it", "socket", c.conf.PodResourcesSocket, "error", err)
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

// statusSMC logs the mechanism ADD would use for an annotated pod. A node
// without it stays ready: only annotated pods lose SMC-R (or, under
// onUnsupported fail, are refused), and STATUS failing would stop every pod.
func (p *Plugin) statusSMC(c *call) {
	s := c.conf.SMCR
	if s.Enabled != nil && !*s.Enabled {
		return
	}
	o := p.smcOffer(c)
	m := o.Uses(s.Transparent)
	attrs := []any{"mechanism", string(m), "transparent", s.Transparent, "offer", o.String()}
	switch {
	case m == smc.MechanismNoSMC || (m == smc.MechanismNone && s.Transparent != config.TransparentOff && s.Transparent != config.TransparentAuto):
		c.log.Warn("SMC-R: annotated pods get no transparent SMC (onUnsupported "+s.OnUnsupported+")", attrs...)
	default:
		c.log.Info("SMC-R: transparent SMC for annotated pods", attrs...)
	}
}

// STATUS's view of the kernel's SMC is kept for smcOfferMaxAge in the state
// directory: probing runs the hook binary, which parses the kernel's BTF
// (a probing STATUS took 2.4-4.9 s under TCG, docs/configuration.md), and
// the runtime sends STATUS every 5 s. A change (the hook binary installed,
// a bpffs mounted) shows within that time.
const (
	smcOfferCache  = "cache-smc-offer.json"
	smcOfferMaxAge = 10 * time.Minute
)

type cachedOffer struct {
	BPFFSDir string    `json:"bpffsDir"`
	Offer    smc.Offer `json:"offer"`
}

func (p *Plugin) smcOffer(c *call) smc.Offer {
	dir := c.conf.SMCR.BPFFSDir
	if b, ok := c.store.ReadCache(smcOfferCache, smcOfferMaxAge); ok {
		var e cachedOffer
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if d.Decode(&e) == nil && e.BPFFSDir == dir {
			return e.Offer
		}
	}
	o := p.env.SMC.Offer(dir)
	b, err := json.Marshal(cachedOffer{BPFFSDir: dir, Offer: o})
	if err == nil {
		err = c.store.WriteCache(smcOfferCache, b)
	}
	if err != nil {
		c.log.Debug("cannot keep STATUS's SMC probe", "error", err)
	}
	return o
}
