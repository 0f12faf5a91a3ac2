package chain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Progress markers recorded in state.Link.Step before and after host changes.
const (
	stepPlanned      = "planned"       // recorded, nothing changed yet
	stepNetdevMoving = "netdev-moving" // exclusive: host identity recorded, move under way
	stepNetdevMoved  = "netdev-moved"  // exclusive: netdev is in the pod
	stepChildAdding  = "child-adding"  // shared: child being created
	stepDone         = "done"
)

// undoStack runs the undo of every host change in reverse order.
type undoStack []func() error

func (u *undoStack) push(f func() error) { *u = append(*u, f) }

func (u undoStack) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		errs = append(errs, u[i]())
	}
	return errors.Join(errs...)
}

// attach gives the pod its devices, recording each step; on failure it undoes
// what it did and removes the record, leaving the node as it found it.
func (p *Plugin) attach(c *call, rec *state.Record, devs []rdma.Device) (err error) {
	if err := p.checkMovable(rec, devs); err != nil {
		return err
	}
	podNS, err := p.env.OpenNS(c.args.Netns)
	if err != nil {
		return cniError(types.ErrInvalidNetNS, "cannot open pod netns "+c.args.Netns, err)
	}
	defer podNS.Close()
	var undo undoStack
	defer func() {
		if err == nil {
			return
		}
		if uerr := undo.run(); uerr != nil {
			c.log.Error("rollback incomplete: state kept for DEL", "container", c.args.ContainerID, "error", uerr)
			return
		}
		if derr := c.store.Delete(c.key()); derr != nil {
			c.log.Error("cannot remove state after rollback", "error", derr)
		}
	}()
	for i, d := range devs {
		rec.Links = append(rec.Links, state.Link{Device: d.Name, Step: stepPlanned,
			HostLink: netdev.HostLink{HostName: d.Netdev, PodName: c.conf.PodIfName(i)}})
		link := &rec.Links[len(rec.Links)-1]
		if rec.Mode == string(rdma.ModeExclusive) {
			err = p.attachExclusive(c, rec, link, d, podNS, &undo)
		} else {
			err = p.attachShared(c, rec, link, podNS, &undo)
		}
		if err != nil {
			return err
		}
		if link.PodName != "" && c.conf.HasIPAM() {
			if err := p.addressLink(c, rec, link, podNS, &undo); err != nil {
				return err
			}
		}
	}
	return p.setupSMC(c, rec, devs, podNS, &undo)
}

// checkMovable refuses, before any change, exclusive-mode devices whose
// driver cannot change netns (moving a soft-RoCE netdev would even destroy
// the rxe device).
func (p *Plugin) checkMovable(rec *state.Record, devs []rdma.Device) error {
	if rec.Mode != string(rdma.ModeExclusive) {
		return nil
	}
	for _, d := range devs {
		if err := p.env.RDMA.CheckMovable(d); err != nil {
			return cniError(CodeMoveUnsupported, "RDMA device "+d.Name+" cannot change netns", err)
		}
	}
	return nil
}

func (p *Plugin) attachExclusive(c *call, rec *state.Record, link *state.Link, d rdma.Device, podNS ns.NetNS, undo *undoStack) error {
	link.Kind = "moved"
	if d.Netdev != "" {
		if err := p.moveNetdev(c, rec, link, podNS, undo); err != nil {
			return err
		}
	} else {
		link.PodName = ""
	}
	// Recorded before the move: a crash right after it still returns the
	// device first on DEL (ReturnToHost of a device not in the pod is a no-op).
	link.RDMAMoved = true
	if err := p.save(c, rec); err != nil {
		return err
	}
	undo.push(func() error { return p.env.RDMA.ReturnToHost(d.Name, podNS.Path()) })
	if err := p.env.RDMA.MoveToNetns(d.Name, int(podNS.Fd())); err != nil {
		var unsup *rdma.UnsupportedMoveError
		if errors.As(err, &unsup) {
			return cniError(CodeMoveUnsupported, "RDMA device "+d.Name+" cannot change netns", err)
		}
		return cniError(CodeLinkSetup, "cannot move RDMA device "+d.Name+" into the pod", err)
	}
	link.Step = stepDone
	return p.save(c, rec)
}

// moveNetdev records the netdev's host identity, then moves it into the pod.
// The undo is registered first: RestoreToHost of a netdev that never left
// the host changes nothing.
func (p *Plugin) moveNetdev(c *call, rec *state.Record, link *state.Link, podNS ns.NetNS, undo *undoStack) error {
	hl, err := p.env.Links.Describe(link.HostName, link.PodName)
	if err != nil {
		return cniError(CodeLinkSetup, "cannot read netdev "+link.HostName, err)
	}
	link.HostLink, link.Step = hl, stepNetdevMoving
	if err := p.save(c, rec); err != nil {
		return err
	}
	undo.push(func() error { return p.env.Links.RestoreToHost(hl, podNS.Path()) })
	moved, err := p.env.Links.MoveToPod(hl.HostName, podNS, hl.PodName)
	if err != nil {
		return cniError(CodeLinkSetup, fmt.Sprintf("cannot move netdev %s of %s into the pod", hl.HostName, link.Device), err)
	}
	link.HostLink, link.Step = moved, stepNetdevMoved
	return p.save(c, rec)
}

func (p *Plugin) attachShared(c *call, rec *state.Record, link *state.Link, podNS ns.NetNS, undo *undoStack) error {
	kind := c.conf.SharedLink.Type
	link.Kind = kind
	if kind == config.LinkNone {
		link.PodName = ""
		link.Step = stepDone
		return p.save(c, rec)
	}
	if link.HostName == "" {
		return cniErrorf(CodeNoDevice, "RDMA device %s has no netdev to create a %s child of", link.Device, kind)
	}
	link.Step = stepChildAdding
	if err := p.save(c, rec); err != nil {
		return err
	}
	spec := netdev.ChildSpec{Kind: kind, Mode: c.conf.SharedLink.Mode, Parent: link.HostName, PodName: link.PodName}
	child, err := p.env.Links.AddChild(spec, podNS)
	if err != nil {
		return cniError(CodeLinkSetup, fmt.Sprintf("cannot create %s child of %s in the pod", kind, link.HostName), err)
	}
	undo.push(func() error { return p.env.Links.DelChild(podNS.Path(), child.Name, child.MAC) })
	link.MAC = child.MAC
	link.Step = stepDone
	return p.save(c, rec)
}

// detach undoes one attachment's links in reverse order. nsPath may be empty
// or gone. It records progress so a failed DEL can be retried.
func (p *Plugin) detach(c *call, rec *state.Record, nsPath string) error {
	var errs []error
	if err := p.releaseSMC(c, rec, nsPath); err != nil {
		errs = append(errs, err)
	}
	for i := len(rec.Links) - 1; i >= 0; i-- {
		if err := p.releaseLink(c, rec, &rec.Links[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rec.Links[i].PodName, err))
			continue
		}
		if err := p.detachLink(&rec.Links[i], nsPath); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rec.Links[i].Device, err))
			continue
		}
		rec.Links = slices.Delete(rec.Links, i, i+1)
	}
	if err := errors.Join(errs...); err != nil {
		if serr := c.store.Put(rec); serr != nil {
			c.log.Error("cannot record DEL progress", "error", serr)
		}
		return err
	}
	return nil
}

func (p *Plugin) detachLink(l *state.Link, nsPath string) error {
	switch l.Kind {
	case "moved":
		if l.RDMAMoved {
			if err := p.env.RDMA.ReturnToHost(l.Device, nsPath); err != nil {
				return err
			}
			l.RDMAMoved = false
		}
		if l.Step == stepPlanned || l.HostName == "" {
			return nil
		}
		err := p.env.Links.RestoreToHost(l.HostLink, nsPath)
		if errors.Is(err, netdev.ErrGone) {
			return nil
		}
		return err
	case config.LinkIPVlan, config.LinkMACVlan:
		if l.Step == stepPlanned {
			return nil
		}
		return p.env.Links.DelChild(nsPath, l.PodName, l.MAC)
	}
	return nil
}

func (p *Plugin) save(c *call, rec *state.Record) error {
	if err := c.store.Put(rec); err != nil {
		return cniError(CodeState, "cannot record attachment state", err)
	}
	return nil
}
