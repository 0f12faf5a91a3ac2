package chain

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/internal/undo"
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

// txn is one ADD's undo: host changes are undone under the node lock, IPAM
// leases without it.
type txn struct {
	host, leases undo.Stack
}

// attachLocked is ADD's first phase, under the node lock: it selects the
// devices and makes the host changes for each, each link recorded once
// before its changes, with whether it will get an IPAM lease (see save).
// The next record is the one finishAttach writes.
func (p *Plugin) attachLocked(c *call, rec *state.Record, req *request, offered []rdma.Device,
	result *types100.Result, tx *txn,
) ([]rdma.Device, ns.NetNS, error) {
	unlock, err := c.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	devs, err := p.selectLocked(c, rec, req, offered, result)
	if err != nil {
		return nil, nil, err
	}
	podNS, err := p.env.Netns.Open(c.args.Netns)
	if err != nil {
		return nil, nil, cniError(types.ErrInvalidNetNS, "cannot open pod netns "+c.args.Netns, err)
	}
	p.recordNetns(c, rec)
	for i, d := range devs {
		rec.Links = append(rec.Links, state.Link{Device: d.Name, Step: stepPlanned,
			HostLink: state.HostLink{HostName: d.Netdev, PodName: c.conf.PodIfName(i)}})
		link := &rec.Links[len(rec.Links)-1]
		if err := p.planPodRange(c, rec, link); err != nil {
			return devs, podNS, err
		}
		if rec.Mode == string(rdma.ModeExclusive) {
			err = p.attachExclusive(c, rec, link, d, podNS, tx)
		} else {
			err = p.attachShared(c, rec, link, podNS, tx)
		}
		if err != nil {
			return devs, podNS, err
		}
	}
	return devs, podNS, nil
}

// selectLocked picks, under the node lock, the devices ADD gives the pod,
// refusing an attachment already recorded and, in exclusive mode, devices
// that cannot move.
func (p *Plugin) selectLocked(c *call, rec *state.Record, req *request, offered []rdma.Device, result *types100.Result) ([]rdma.Device, error) {
	if _, err := c.store.Get(c.key()); !errors.Is(err, state.ErrNotFound) {
		if err == nil {
			return nil, cniErrorf(CodeState, "attachment %s/%s is already recorded: DEL it first", c.args.ContainerID, c.args.IfName)
		}
		return nil, cniError(CodeState, "cannot read attachment state", err)
	}
	busy, offered, err := p.exclusiveHolders(c, rec, offered)
	if err != nil {
		return nil, err
	}
	var uplinks map[string]string
	if rec.Mode == string(rdma.ModeExclusive) {
		if uplinks, err = p.env.Links.NodeUplinks(); err != nil {
			return nil, cniError(CodeLinkSetup, "cannot tell which host netdevs carry the node's traffic", err)
		}
	}
	devs, err := selectDevices(req, selectInput{mode: rdma.Mode(rec.Mode), offered: offered, busy: busy,
		macs: resultMACs(result), needNetdev: c.conf.SharedLink.Type != config.LinkNone, uplinks: uplinks})
	if err != nil {
		return nil, err
	}
	if err := checkUplinks(devs, uplinks); err != nil {
		return nil, err
	}
	return devs, p.checkMovable(rec, devs)
}

// checkUplinks refuses, always, to move a netdev that carries the node's
// own traffic (its default route or its address, directly or through a
// bond, bridge or VLAN above it): the node, kubelet and every pod on it
// would lose the network until DEL.
func checkUplinks(devs []rdma.Device, uplinks map[string]string) error {
	for _, d := range devs {
		if what := uplinks[d.Netdev]; d.Netdev != "" && what != "" {
			return cniErrorf(CodeNodeUplink, "netdev %s of RDMA device %s carries %s: exclusive mode never moves it into a pod, "+
				"as the node would lose its network; offer another device (devices) or use shared mode", d.Netdev, d.Name, what)
		}
	}
	return nil
}

// recordNetns records the pod netns's identity: its inode, and its cookie,
// which unlike the inode the kernel never gives another netns.
func (p *Plugin) recordNetns(c *call, rec *state.Record) {
	id, err := p.env.Netns.ID(c.args.Netns)
	rec.NetNSIno, rec.NetNSCookie = id.Inode, id.Cookie
	if id.Cookie == 0 {
		c.log.Warn("cannot read the pod netns's cookie: a reused netns inode could hide its death", "netns", c.args.Netns, "error", err)
	}
}

// exclusiveHolders maps, in exclusive mode, the devices other pods hold to
// their holders, after reclaiming the stranded ones (and listing the devices
// again when that renamed netdevs). Shared mode holds nothing: no record is
// read, so ADD does not slow down with the number of pods on the node.
func (p *Plugin) exclusiveHolders(c *call, rec *state.Record, offered []rdma.Device) (map[string]string, []rdma.Device, error) {
	if rec.Mode != string(rdma.ModeExclusive) {
		return nil, offered, nil
	}
	recs, err := p.listRecords(c)
	if err != nil {
		return nil, nil, err
	}
	recs, reclaimed := p.reclaimStranded(c, recs)
	if reclaimed {
		// Netdevs came back under new names: list the devices again.
		if offered, err = p.offered(c.conf); err != nil {
			return nil, nil, err
		}
	}
	return busyDevices(recs, c.conf.Devices), offered, nil
}

// holdsLease reports whether a link of rec has (or is taking) an IPAM lease.
func holdsLease(rec *state.Record) bool { return leases(rec) > 0 }

// leases counts the links of rec that have (or are taking) an IPAM lease.
func leases(rec *state.Record) int {
	n := 0
	for _, l := range rec.Links {
		if l.IPAM {
			n++
		}
	}
	return n
}

// addressLinks is ADD's second phase, without the node lock.
func (p *Plugin) addressLinks(c *call, rec *state.Record, podNS ns.NetNS, tx *txn) error {
	for i := range rec.Links {
		if rec.Links[i].IPAM {
			if err := p.addressLink(c, &rec.Links[i], podNS, tx); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishAttach is ADD's last phase, under the node lock: the device-info
// file, the SMC-R entries (reference-counted across records) and the final
// record.
func (p *Plugin) finishAttach(c *call, rec *state.Record, devs []rdma.Device, podNS ns.NetNS, tx *txn) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.publishDeviceInfo(c, rec, devs, &tx.host); err != nil {
		return err
	}
	if err := p.setupSMC(c, rec, devs, podNS, &tx.host); err != nil {
		return err
	}
	return p.save(c, rec)
}

// rollback undoes a failed ADD: the leases first, then the host changes
// under the lock; the record goes only when everything was undone.
func (p *Plugin) rollback(c *call, rec *state.Record, tx *txn) {
	if !c.recorded && tx.host.Len() == 0 && tx.leases.Len() == 0 {
		return // nothing changed, nothing recorded
	}
	leaseErr := tx.leases.Run()
	unlock, err := c.lock()
	if err != nil {
		c.log.Error("rollback cannot take the node lock: state kept for DEL", "container", c.args.ContainerID, "error", err)
		return
	}
	defer unlock()
	if uerr := errors.Join(leaseErr, tx.host.Run()); uerr != nil {
		c.log.Error("rollback incomplete: state kept for DEL", "container", c.args.ContainerID, "error", uerr)
		return
	}
	if derr := c.store.Delete(c.key()); derr != nil {
		c.log.Error("cannot remove state after rollback", "error", derr)
	}
}

// checkMovable refuses, before any change, exclusive-mode devices whose
// driver cannot change netns (moving a soft-RoCE netdev would even destroy
// the rxe device) or whose netdev cannot leave the host netns (a bond: the
// kernel refuses the move, and a failed move must not even be tried).
func (p *Plugin) checkMovable(rec *state.Record, devs []rdma.Device) error {
	if rec.Mode != string(rdma.ModeExclusive) {
		return nil
	}
	for _, d := range devs {
		if err := p.env.RDMA.CheckMovable(d); err != nil {
			return cniError(CodeMoveUnsupported, "RDMA device "+d.Name+" cannot change netns", err)
		}
		if d.Netdev == "" {
			continue
		}
		why, err := p.env.Links.NetnsLocal(d.Netdev)
		if err != nil {
			return cniError(CodeLinkSetup, "cannot read netdev "+d.Netdev, err)
		}
		if why != "" {
			return cniErrorf(CodeMoveUnsupported, "netdev %s of RDMA device %s cannot leave the host netns: %s; "+
				"exclusive mode moves it into the pod, shared mode gives the pod an ipvlan child of it instead", d.Netdev, d.Name, why)
		}
	}
	return nil
}

// attachExclusive moves the netdev (if the device has one), then the RDMA
// device, into the pod. Both are recorded before either moves: DEL after a
// crash anywhere in between returns the device (ReturnToHost of a device
// not in the pod is a no-op) and restores the netdev from wherever it is
// (RestoreToHost of a netdev that never left the host changes nothing).
// Each undo is registered before its move, as a move may fail after the
// device crossed.
func (p *Plugin) attachExclusive(c *call, rec *state.Record, link *state.Link, d rdma.Device, podNS ns.NetNS, tx *txn) error {
	link.Kind = "moved"
	if d.Netdev == "" {
		link.PodName = ""
	} else {
		hl, err := p.env.Links.Describe(link.HostName, link.PodName)
		if err != nil {
			return cniError(CodeLinkSetup, "cannot read netdev "+link.HostName, err)
		}
		link.HostLink, link.Step = hl, stepNetdevMoving
	}
	link.RDMAMoved = true
	link.IPAM = link.PodName != "" && c.conf.HasIPAM()
	if err := p.save(c, rec); err != nil {
		return err
	}
	if d.Netdev != "" {
		hl := link.HostLink
		tx.host.Push(func() error { return p.env.Links.RestoreToHost(hl, podNS.Path()) })
		if err := p.env.Links.MoveToPod(hl, podNS); err != nil {
			return cniError(CodeLinkSetup, fmt.Sprintf("cannot move netdev %s of %s into the pod", hl.HostName, link.Device), err)
		}
		failpoint.Hit("add-netdev-moved")
		link.Step = stepNetdevMoved
	}
	tx.host.Push(func() error { return p.env.RDMA.ReturnToHost(d.Name, podNS.Path()) })
	if err := p.env.RDMA.MoveToNetns(d.Name, int(podNS.Fd())); err != nil {
		var unsup *rdma.UnsupportedMoveError
		if errors.As(err, &unsup) {
			return cniError(CodeMoveUnsupported, "RDMA device "+d.Name+" cannot change netns", err)
		}
		return cniError(CodeLinkSetup, "cannot move RDMA device "+d.Name+" into the pod", err)
	}
	failpoint.Hit("add-rdma-moved")
	// The next record written (the next link's or the final one) says so;
	// until then DEL gives back the same with the one above.
	link.Step = stepDone
	return nil
}

func (p *Plugin) attachShared(c *call, rec *state.Record, link *state.Link, podNS ns.NetNS, tx *txn) error {
	kind := c.conf.SharedLink.Type
	link.Kind = kind
	if kind == config.LinkNone {
		link.PodName = ""
		link.Step = stepDone
		return nil // no host change: the final record is the first one
	}
	if link.HostName == "" {
		return cniErrorf(CodeNoDevice, "RDMA device %s has no netdev to create a %s child of", link.Device, kind)
	}
	link.IPAM = c.conf.HasIPAM()
	if link.IPAM {
		if err := p.checkGIDRoom(link); err != nil {
			return err
		}
	}
	link.Step = stepChildAdding
	if err := p.save(c, rec); err != nil {
		return err
	}
	spec := netdev.ChildSpec{Kind: kind, Mode: c.conf.SharedLink.Mode, Parent: link.HostName, PodName: link.PodName}
	child, err := p.env.Links.AddChild(spec, podNS)
	if child.Name != "" { // created, even when AddChild failed after that
		tx.host.Push(func() error { return p.env.Links.DelChild(podNS.Path(), child.Name, child.MAC) })
	}
	if err != nil {
		return cniError(CodeLinkSetup, fmt.Sprintf("cannot create %s child of %s in the pod", kind, link.HostName), err)
	}
	failpoint.Hit("add-child-created")
	// Recorded with the next record: until then DEL deletes the child by
	// name and kind, without its MAC.
	link.MAC = child.MAC
	c.childMTU[child.Name] = child.MTU
	link.Step = stepDone
	return nil
}

// gidsPerAddress is what one address on a shared-mode child takes of its
// RDMA port's GID table: a RoCE v1 and a RoCE v2 entry (measured,
// docs/configuration.md "Shared mode").
const gidsPerAddress = 2

// checkGIDRoom refuses, before the child is made, a link that will get an
// address when port 1's GID table of its RDMA device has no room for it:
// the kernel would add no GID for the address and tell no one (it works
// for IP, never for RoCE). It asks room for one address; a port without a
// GID table (size 0) is not checked.
func (p *Plugin) checkGIDRoom(link *state.Link) error {
	free, size, err := p.env.RDMA.FreeGIDs(link.Device, 1, gidsPerAddress)
	if err != nil {
		return cniError(CodeGIDTableFull, "cannot read the GID table of RDMA device "+link.Device, err)
	}
	if size > 0 && free < gidsPerAddress {
		return cniErrorf(CodeGIDTableFull, "shared mode: the GID table of RDMA device %s (port 1, %d entries) has %d free, "+
			"and the pod's address on a child of %s needs %d: it would be no RoCE GID; the port takes no more pods",
			link.Device, size, free, link.HostName, gidsPerAddress)
	}
	return nil
}

// save records rec before a host change; the call then owns a record that
// a failed ADD removes. The write is not synced (a killed call leaves it in
// the page cache for the next one, and what it guards, netdevs, RDMA
// devices, children, pnet entries, the socket hook, does not outlive a
// power loss either), except one that names an IPAM lease the synced
// records did not: the lease, on the IPAM's disk, outlives a power loss, so
// the record that lets DEL release it must too. Each link is recorded with
// its lease before its host changes, so every lease is recorded before it
// is taken; a crash before the IPAM ran leaves a lease flag whose release
// (an IPAM's DEL of a lease it does not hold) changes nothing.
func (p *Plugin) save(c *call, rec *state.Record) error {
	put := c.store.PutUnsynced
	if n := leases(rec); n > c.leasesSynced {
		put, c.leasesSynced = c.store.Put, n
	}
	c.recorded = true
	if err := put(rec); err != nil {
		return cniError(CodeState, "cannot record attachment state", err)
	}
	return nil
}
