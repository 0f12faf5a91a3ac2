package chain

import (
	"cmp"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// bootID is the running kernel's boot id, "" (every record's boot then
// unknown, see state.BootOf) when it cannot be read; read once per call.
func (p *Plugin) bootID(c *call) string {
	if c.bootRead {
		return c.boot
	}
	c.bootRead = true
	id, err := state.ReadBootID(cmp.Or(p.env.BootIDPath, state.BootIDFile))
	if err != nil {
		c.log.Warn("cannot read the kernel's boot id: attachments of an earlier boot are not told from this boot's", "error", err)
	}
	c.boot = id
	return id
}

// releaseEarlierBootHost gives back the host side of an attachment made
// in an earlier boot: only what a reboot keeps, its device-info file. Its pod
// netns, hook listing, pnet rows, children and GIDs died with that boot,
// and the kernel may have given their numbers (a netns inode, a hook key)
// to this boot's pods: nothing of the kernel is touched on its behalf. Its
// moved devices came up in the host netns at boot. Links whose leases are
// still held stay, marked released.
func releaseEarlierBootHost(c *call, rec *state.Record) {
	c.log.Info("attachment of an earlier boot: its kernel state died with that boot, only its leases and files are given back",
		"holder", rec.ContainerID, "ifname", rec.IfName, "bootId", rec.BootID)
	rec.SMC = nil
	if rec.DeviceInfo != nil {
		removeDeviceInfo(c, rec.DeviceInfo)
		rec.DeviceInfo = nil
	}
	kept := rec.Links[:0]
	for _, l := range rec.Links {
		if l.IPAM {
			l.Step, l.RDMAMoved = state.StepReleased, false
			kept = append(kept, l)
		}
	}
	rec.Links = kept
}
