package chain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// draftRecord is the record an ADD builds, with how far it got on disk.
type draftRecord struct {
	*state.Record
	// written says that a version is on disk, so a failure has something
	// to release.
	written bool
	// leasesSynced is how many IPAM leases the last synced version names.
	leasesSynced int
}

// attached is what ADD's first phase produced: the devices it gave the pod,
// the pod netns it opened (nil when it did not get that far), the MTU the
// kernel gave each child it created (by pod-side name), and the stranded
// attachments it reclaimed whose leases are still to release (their key
// locks held).
type attached struct {
	devs      []rdma.Device
	podNS     ns.NetNS
	childMTU  map[string]int
	reclaimed []heldRecord
}

// attachLocked is ADD's first phase, under the node lock: it selects the
// devices and makes the host changes for each, each link recorded once
// before its changes, with whether it will get an IPAM lease (see save).
// The next record is saveChildIDs' (children with leases) or the one
// finishAttach writes. What it produced is
// returned with an error too: the netns to close, the leases to release.
func (p *Plugin) attachLocked(c *call, draft *draftRecord, req *request, offered []rdma.Device,
	result *types100.Result,
) (att attached, err error) {
	unlock, err := c.lock()
	if err != nil {
		return att, err
	}
	defer unlock()
	att.devs, att.reclaimed, err = p.selectLocked(c, draft.Record, req, offered, result)
	if err != nil {
		return att, err
	}
	names, err := c.podIfNames(att.devs)
	if err != nil {
		return att, err
	}
	if att.podNS, err = p.env.Netns.Open(c.args.Netns); err != nil {
		return att, cniError(types.ErrInvalidNetNS, "cannot open pod netns "+c.args.Netns, err)
	}
	p.recordNetns(c, draft.Record)
	att.childMTU = map[string]int{}
	for i, d := range att.devs {
		draft.Links = append(draft.Links, state.Link{Device: d.Name, Step: state.StepPlanned,
			HostLink: state.HostLink{HostName: d.Netdev, PodName: names[i]}})
		link := &draft.Links[len(draft.Links)-1]
		if err := p.planPodRange(c, draft.Record, link); err != nil {
			return att, err
		}
		if draft.Mode == rdma.ModeExclusive {
			err = p.attachExclusive(c, draft, link, d, att.podNS)
		} else {
			att.childMTU[link.PodName], err = p.attachShared(c, draft, link, att.podNS)
		}
		if err != nil {
			return att, err
		}
	}
	return att, p.saveChildIDs(c, draft)
}

// saveChildIDs records the children's nsids and ifindexes (see
// attachShared) before their leases are taken: a release deletes or
// proves gone each child through them, whatever its netns path names,
// before it gives back the child's address. Without a lease they are
// recorded with the final record.
func (p *Plugin) saveChildIDs(c *call, draft *draftRecord) error {
	if leases(draft.Record) == 0 || !slices.ContainsFunc(draft.Links, func(l state.Link) bool { return l.PodNetnsID != nil }) {
		return nil
	}
	return p.save(c, draft)
}

// selectLocked picks, under the node lock, the devices ADD gives the pod,
// refusing an attachment already recorded and, in exclusive mode, devices
// that cannot move. It returns too the stranded attachments it reclaimed
// whose leases are still to release, also with an error.
func (p *Plugin) selectLocked(c *call, rec *state.Record, req *request, offered []rdma.Device,
	result *types100.Result,
) (devs []rdma.Device, reclaimed []heldRecord, err error) {
	if _, err := c.store.Get(c.key()); !errors.Is(err, state.ErrNotFound) {
		if err == nil {
			return nil, nil, cniErrorf(CodeState, "attachment %s/%s is already recorded: DEL it first", c.args.ContainerID, c.args.IfName)
		}
		return nil, nil, cniError(CodeState, "cannot read attachment state", err)
	}
	busy, offered, reclaimed, err := p.exclusiveHolders(c, rec, offered)
	if err != nil {
		return nil, reclaimed, err
	}
	var uplinks map[string]string
	if rec.Mode == rdma.ModeExclusive {
		if uplinks, err = p.env.Links.NodeUplinks(c.conf.NodeAddrs()); err != nil {
			return nil, reclaimed, cniError(CodeLinkSetup, "cannot tell which host netdevs carry the node's traffic", err)
		}
	}
	devs, err = selectDevices(req, selectInput{mode: rec.Mode, offered: offered, busy: busy,
		macs: resultMACs(result), needNetdev: c.sharedLink().Kind() != state.LinkNone, uplinks: uplinks})
	if err == nil {
		err = checkUplinks(devs, uplinks)
	}
	if err == nil {
		err = p.checkMovable(rec, devs)
	}
	return devs, reclaimed, err
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
// which unlike the inode the kernel never gives another netns, and the
// boot they belong to (the kernel numbers both again at each boot).
func (p *Plugin) recordNetns(c *call, rec *state.Record) {
	id, err := p.env.Netns.ID(c.args.Netns)
	rec.NetNSIno, rec.NetNSCookie = id.Inode, id.Cookie
	rec.BootID = p.bootID(c)
	if id.Cookie == 0 {
		c.log.Warn("cannot read the pod netns's cookie: a reused netns inode could hide its death", "netns", c.args.Netns, "error", err)
	}
}

// exclusiveHolders maps, in exclusive mode, the devices other pods hold to
// their holders, after reclaiming the stranded ones (and listing the devices
// again when that renamed netdevs), and returns the reclaimed attachments
// whose leases are still to release. Shared mode holds nothing: no record
// is read, so ADD does not slow down with the number of pods on the node.
func (p *Plugin) exclusiveHolders(c *call, rec *state.Record, offered []rdma.Device,
) (busy map[string]string, _ []rdma.Device, pending []heldRecord, err error) {
	if rec.Mode != rdma.ModeExclusive {
		return nil, offered, nil, nil
	}
	recs, err := p.listRecords(c)
	if err != nil {
		return nil, nil, nil, err
	}
	recs, pending = p.reclaimStranded(c, recs)
	// Netdevs move in exclusive mode and come back under other names (the
	// kernel's when a pod netns dies, then the record's when this reclaim,
	// a DEL or the reconcile daemon's repair restores them, each under
	// this lock): what ADD read of the devices before it held the lock is
	// read again under it, or ADD would look for a netdev under a name it
	// no longer has and fail with 104.
	if offered, err = p.reread(offered); err != nil {
		return nil, nil, pending, err
	}
	return busyDevices(recs, c.conf.Devices), offered, pending, nil
}

// reread is offered (the devices ADD chose from, its filters applied) as
// the kernel has them now: each one's netdev read again; one gone is left
// out.
func (p *Plugin) reread(offered []rdma.Device) ([]rdma.Device, error) {
	all, err := p.env.RDMA.Devices()
	if err != nil {
		return nil, cniError(CodeNoRDMA, "cannot list RDMA devices", err)
	}
	out := make([]rdma.Device, 0, len(offered))
	for _, d := range offered {
		if i := slices.IndexFunc(all, func(n rdma.Device) bool { return n.Name == d.Name }); i >= 0 {
			out = append(out, all[i])
		}
	}
	return out, nil
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

// addressLinks is ADD's second phase, without the node lock: it returns
// the IPAM results by pod-side interface name.
func (p *Plugin) addressLinks(c *call, rec *state.Record, podNS ns.NetNS) (map[string]*types100.Result, error) {
	leases := map[string]*types100.Result{}
	for i := range rec.Links {
		if rec.Links[i].IPAM {
			res, err := p.addressLink(c, &rec.Links[i], podNS)
			if err != nil {
				return nil, err
			}
			leases[rec.Links[i].PodName] = res
		}
	}
	return leases, nil
}

// finishAttach is ADD's last phase, under the node lock: the device-info
// file, the SMC-R entries (reference-counted across records) and the final
// record. An attachment released while ADD ran without the lock (the
// reconcile daemon's DEL or the runtime's) is not written back: ADD fails,
// and its rollback gives back what it made after the release.
func (p *Plugin) finishAttach(c *call, draft *draftRecord, devs []rdma.Device, podNS ns.NetNS) error {
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := stillRecorded(c, draft); err != nil {
		return err
	}
	if err := p.publishDeviceInfo(c, draft, devs); err != nil {
		return err
	}
	if err := p.setupSMC(c, draft, devs, podNS); err != nil {
		return err
	}
	return p.save(c, draft)
}

// stillRecorded fails when the record this ADD last wrote is no longer on
// disk as its own (the same creation time).
func stillRecorded(c *call, draft *draftRecord) error {
	if !draft.written {
		return nil // nothing on disk yet: nothing a DEL could release
	}
	cur, err := c.store.Get(c.key())
	switch {
	case errors.Is(err, state.ErrNotFound):
		return cniErrorf(CodeState, "attachment %s/%s was released while ADD ran (by a DEL or the reconcile daemon): nothing is attached", c.args.ContainerID, c.args.IfName)
	case err != nil:
		return cniError(CodeState, "cannot read attachment state", err)
	case !cur.CreatedAt.Equal(draft.CreatedAt):
		// Another ADD of the same container and interface recorded it
		// since: what this one made (children, leases) goes by the same
		// names and is that record's to release, so nothing is undone here.
		draft.written = false
		return cniErrorf(CodeState, "attachment %s/%s was released while ADD ran and recorded again by another call", c.args.ContainerID, c.args.IfName)
	}
	return nil
}

// rollback undoes a failed ADD the way DEL undoes any attachment: release
// gives back what the record says, the leases first, then the host side
// under the node lock, and forgets the record. Every step records what it
// changes before the change, and what it did not change after all, so the
// record names exactly what is to be undone (a release of what a step
// recorded but never did changes nothing). A release that fails keeps the
// record with its progress for the runtime's DEL, GC or reclaim; the
// runtime sees the ADD's own error.
func (p *Plugin) rollback(c *call, draft *draftRecord) {
	if !draft.written {
		return // nothing recorded, nothing changed
	}
	if err := p.release(c, draft.Record, c.args.Netns); err != nil {
		c.log.Error("cannot undo the failed ADD: record kept for DEL, GC or reclaim", "error", err)
	}
}

// checkMovable refuses, before any change, exclusive-mode devices whose
// driver cannot change netns (moving a soft-RoCE netdev would even destroy
// the rxe device) or whose netdev cannot leave the host netns (a bond: the
// kernel refuses the move, and a failed move must not even be tried).
func (p *Plugin) checkMovable(rec *state.Record, devs []rdma.Device) error {
	if rec.Mode != rdma.ModeExclusive {
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
// A failed ADD is undone the same way, from the record: a move may fail
// after the device crossed.
func (p *Plugin) attachExclusive(c *call, draft *draftRecord, link *state.Link, d rdma.Device, podNS ns.NetNS) error {
	link.Kind = state.LinkMoved
	if d.Netdev == "" {
		link.PodName = ""
	} else {
		hl, err := p.env.Links.Describe(link.HostName, link.PodName)
		if err != nil {
			return cniError(CodeLinkSetup, "cannot read netdev "+link.HostName, err)
		}
		link.HostLink, link.Step = hl, state.StepNetdevMoving
	}
	link.RDMAMoved = true
	link.IPAM = link.PodName != "" && c.leasing()
	if err := p.save(c, draft); err != nil {
		return err
	}
	if d.Netdev != "" {
		if err := p.env.Links.MoveToPod(link.HostLink, podNS); err != nil {
			return cniError(CodeLinkSetup, fmt.Sprintf("cannot move netdev %s of %s into the pod", link.HostName, link.Device), err)
		}
		failpoint.Hit("add-netdev-moved")
		link.Step = state.StepNetdevMoved
	}
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
	link.Step = state.StepDone
	return nil
}

// attachShared creates the link's child in the pod, recorded before it is
// created, and returns the MTU the kernel gave it (0 without a child). A
// child AddChild did not create is recorded as such before the error goes
// up, so the undo never deletes a link of that name it did not make.
func (p *Plugin) attachShared(c *call, draft *draftRecord, link *state.Link, podNS ns.NetNS) (int, error) {
	kind := c.sharedLink().Kind()
	link.Kind = kind
	if kind == state.LinkNone {
		link.PodName = ""
		link.Step = state.StepDone
		return 0, nil // no host change: the final record is the first one
	}
	if link.HostName == "" {
		return 0, cniErrorf(CodeNoDevice, "RDMA device %s has no netdev to create a %s child of", link.Device, kind)
	}
	link.IPAM = c.leasing()
	if link.IPAM && c.conf.PodSoftRoCE == "" { // a new rxe device has a table of its own
		if err := p.checkGIDRoom(link); err != nil {
			return 0, err
		}
	}
	link.Step = state.StepChildAdding
	if err := p.save(c, draft); err != nil {
		return 0, err
	}
	spec := netdev.ChildSpec{Kind: kind, Mode: c.sharedLink().Mode, Parent: link.HostName, PodName: link.PodName}
	child, err := p.env.Links.AddChild(spec, podNS)
	if err != nil {
		err = cniError(CodeLinkSetup, fmt.Sprintf("cannot create %s child of %s in the pod", kind, link.HostName), err)
		if child.Name != "" { // created all the same: the record says so
			return 0, err
		}
		link.Step, link.IPAM = state.StepPlanned, false
		if serr := p.save(c, draft); serr != nil {
			c.log.Error("cannot record that no child was created: its undo deletes a child of that name in the pod", "ifname", link.PodName, "error", serr)
		}
		return 0, err
	}
	failpoint.Hit("add-child-created")
	// Recorded with the next record (saveChildIDs' when the child has a
	// lease): until then DEL deletes the child by name and kind, without
	// its MAC, and takes it for gone when the netns path is.
	link.MAC = child.MAC
	if child.NetnsID != nil {
		link.PodNetnsID, link.PodIndex = child.NetnsID, child.Index
	}
	if c.conf.PodSoftRoCE != "" {
		if err := p.attachSoftRoCE(c, draft, link); err != nil {
			return 0, err
		}
	}
	link.Step = state.StepDone
	return child.MTU, nil
}

// checkGIDRoom refuses, before the child is made, a link that will get an
// address when port 1's GID table of its RDMA device has no room for it:
// the kernel would add no GID for the address and tell no one (it works
// for IP, never for RoCE). It asks room for one address; a port without a
// GID table (size 0) is not checked.
func (p *Plugin) checkGIDRoom(link *state.Link) error {
	free, size, err := p.env.RDMA.FreeGIDs(link.Device, 1, rdma.GIDsPerAddress)
	if err != nil {
		return cniError(CodeGIDTableFull, "cannot read the GID table of RDMA device "+link.Device, err)
	}
	if size > 0 && free < rdma.GIDsPerAddress {
		return cniErrorf(CodeGIDTableFull, "shared mode: the GID table of RDMA device %s (port 1, %d entries) has %d free, "+
			"and the pod's address on a child of %s needs %d: it would be no RoCE GID; the port takes no more pods",
			link.Device, size, free, link.HostName, rdma.GIDsPerAddress)
	}
	return nil
}

// save records draft before a host change; from then on a failed ADD
// releases it (rollback). The write is not synced (a killed call leaves it in
// the page cache for the next one, and what it guards, netdevs, RDMA
// devices, children, pnet entries, the socket hook, does not outlive a
// power loss either), except one that names an IPAM lease the synced
// records did not: the lease, on the IPAM's disk, outlives a power loss, so
// the record that lets DEL release it must too. Each link is recorded with
// its lease before its host changes, so every lease is recorded before it
// is taken; a crash before the IPAM ran leaves a lease flag whose release
// (an IPAM's DEL of a lease it does not hold) changes nothing.
func (p *Plugin) save(c *call, draft *draftRecord) error {
	put := c.store.PutUnsynced
	if n := leases(draft.Record); n > draft.leasesSynced {
		put, draft.leasesSynced = c.store.Put, n
	}
	draft.written = true
	if err := put(draft.Record); err != nil {
		return cniError(CodeState, "cannot record attachment state", err)
	}
	return nil
}
