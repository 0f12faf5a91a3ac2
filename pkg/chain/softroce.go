package chain

import (
	"fmt"
	"slices"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// softRoCEOffer is what a podSoftRoCE network offers the pod: one rxe
// device of its own, named after the attachment, on a macvlan child of the
// configured NIC. It is refused (112), before anything changes, where such
// a device cannot carry the pod's RoCE: in exclusive RDMA netns mode (an
// rxe device made inside a netns cannot open its port there, measured on
// 7.3), on a kernel whose rdma_rxe has no socket outside init_net (before
// 7.1), and when the NIC has an RDMA device already (its GIDs for the
// children's addresses, as upper devices, would take the pods' traffic).
func (p *Plugin) softRoCEOffer(c *call, mode rdma.Mode) ([]rdma.Device, error) {
	nic := c.conf.PodSoftRoCE
	if mode != rdma.ModeShared {
		return nil, cniErrorf(CodeSoftRoCE, "podSoftRoCE: the RDMA subsystem is in %s netns mode: an rxe device made inside a pod's netns "+
			"cannot open its port there; per-pod soft-RoCE needs the shared mode", mode)
	}
	if why := p.env.SoftRoCE.Unsupported(); why != "" {
		return nil, cniErrorf(CodeSoftRoCE, "podSoftRoCE: %s", why)
	}
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return nil, cniError(CodeNoRDMA, "cannot list RDMA devices", err)
	}
	if i := slices.IndexFunc(all, func(d rdma.Device) bool { return d.Netdev == nic }); i >= 0 {
		return nil, cniErrorf(CodeSoftRoCE, "podSoftRoCE: netdev %s has RDMA device %s: its GIDs for the pods' addresses would take "+
			"their RoCE traffic from the pods' own rxe devices; offer that device in shared mode without podSoftRoCE instead", nic, all[i].Name)
	}
	name := rdma.SoftRoCEName(c.conf.Name, c.args.ContainerID, c.args.IfName)
	return []rdma.Device{{Name: name, Driver: "rdma_rxe", Netdev: nic, PCI: p.env.SoftRoCE.NetdevPCI(nic)}}, nil
}

// attachSoftRoCE makes the link's rxe device on its child, inside the pod
// netns, recorded before it is made. A device of that name already there
// is not this call's to claim (the name is the attachment's own, and an
// attachment already recorded is refused): ADD fails before recording it.
func (p *Plugin) attachSoftRoCE(c *call, draft *draftRecord, link *state.Link) error {
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return cniError(CodeNoRDMA, "cannot list RDMA devices", err)
	}
	if slices.ContainsFunc(all, func(d rdma.Device) bool { return d.Name == link.Device }) {
		return cniErrorf(CodeSoftRoCE, "podSoftRoCE: an RDMA device named %s exists already, which this attachment did not record: "+
			"it is left alone", link.Device)
	}
	link.SoftRoCE = true
	if err := p.save(c, draft); err != nil {
		return err
	}
	if err := p.env.SoftRoCE.Add(c.args.Netns, link.Device, link.PodName); err != nil {
		return cniError(CodeLinkSetup, fmt.Sprintf("cannot make rxe device %s on %s in the pod", link.Device, link.PodName), err)
	}
	failpoint.Hit("add-rxe-created")
	return nil
}

// releaseSoftRoCE deletes the link's rxe device, if it made one, before
// its child goes.
func (p *Plugin) releaseSoftRoCE(l *state.Link) error {
	if !l.SoftRoCE {
		return nil
	}
	if err := p.env.SoftRoCE.Del(l.Device); err != nil {
		return err
	}
	l.SoftRoCE = false
	failpoint.Hit("del-rxe-deleted")
	return nil
}

// checkSoftRoCE fails when the link's rxe device is no longer listed.
func (p *Plugin) checkSoftRoCE(l state.Link) error {
	if !l.SoftRoCE {
		return nil
	}
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(all, func(d rdma.Device) bool { return d.Name == l.Device }) {
		return fmt.Errorf("rxe device %s is gone", l.Device)
	}
	return nil
}

// statusSoftRoCE logs, for a podSoftRoCE network, whether ADD can give a
// pod its own rxe device here, and why not (ADD's 112). STATUS stays
// successful: it failing would stop every sandbox on the node, those
// without RDMA too.
func (p *Plugin) statusSoftRoCE(c *call) {
	if c.conf.PodSoftRoCE == "" {
		return
	}
	mode, err := p.env.RDMA.NetnsMode()
	if err != nil {
		c.log.Warn("podSoftRoCE: cannot read the RDMA netns mode: ADD fails", "netdev", c.conf.PodSoftRoCE, "error", err)
		return
	}
	if _, err := p.softRoCEOffer(c, mode); err != nil {
		c.log.Warn("podSoftRoCE: ADD refuses pods that need RDMA here", "netdev", c.conf.PodSoftRoCE, "error", err)
		return
	}
	c.log.Info("podSoftRoCE: each RDMA pod gets an rxe device of its own", "netdev", c.conf.PodSoftRoCE)
}
