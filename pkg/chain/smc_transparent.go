package chain

import (
	"errors"
	"fmt"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// pickTransparent decides how an annotated pod's TCP sockets become SMC
// sockets, the way smcr.transparent picks: the tcp2smc sysctl (Alibaba
// Cloud Linux 3), set in the pod here, or the node's BPF socket hook
// (Linux >= 6.11), which listHook then asks for, or, in auto mode where
// neither exists, nothing but a log line (applications then need AF_SMC,
// IPPROTO_SMC or a preload library). It sets draft.SMC.Transparent; the
// caller saves it before the listing.
func (p *Plugin) pickTransparent(c *call, draft *draftRecord, podNS string) (listHook bool, err error) {
	mode := c.conf.SMCR.Transparent
	mech, why, probeErr := smc.Pick(mode,
		func() (bool, error) { return p.env.SMC.TCP2SMC(podNS) },
		func() error { return p.env.SMC.HookSupported(c.conf.SMCR.BPFFSDir) })
	if probeErr != nil {
		c.log.Warn("cannot set net.smc.tcp2smc in the pod", "error", probeErr)
	}
	switch {
	case mech == smc.MechanismTCP2SMC:
		draft.SMC.Transparent = config.TransparentTCP2SMC
		return false, nil
	case why == nil && mech == smc.MechanismNone: // off
		return false, nil
	case why != nil && mode == config.TransparentAuto:
		c.log.Info("no net.smc.tcp2smc and no SMC socket hook on this kernel: applications need AF_SMC, IPPROTO_SMC or an SMC preload library", "hook", errors.Unwrap(why).Error())
		return false, nil
	case why != nil:
		return false, p.smcUnsupported(c, why.Error())
	}
	if draft.NetNSIno == 0 {
		return false, cniErrorf(CodeSMC, "cannot list the pod's netns %s in the SMC socket hook: its inode is unknown", podNS)
	}
	draft.SMC.Transparent = config.TransparentBPF
	return true, nil
}

// listInHook lists the pod's netns in the node's socket hook (recorded
// before: draft.SMC.Transparent is bpf on disk).
func (p *Plugin) listInHook(c *call, draft *draftRecord, podNS string) error {
	loaded, err := p.env.SMC.HookAdd(c.conf.SMCR.BPFFSDir, draft.NetNSIno)
	if err != nil {
		return cniError(CodeSMC, fmt.Sprintf("cannot list the pod's netns %s in the SMC socket hook", podNS), err)
	}
	c.log.Info("SMC-R: the pod's netns is listed in the SMC socket hook",
		"netnsIno", draft.NetNSIno, "programLoaded", loaded)
	failpoint.Hit("add-smc-hook-listed")
	return nil
}

// smcUnsupported fails with 108 under onUnsupported: fail, else logs.
func (p *Plugin) smcUnsupported(c *call, reason string) error {
	if c.conf.SMCR.OnUnsupported == "fail" {
		return cniErrorf(CodeSMC, "smcr.transparent %s: %s", c.conf.SMCR.Transparent, reason)
	}
	c.log.Warn("SMC-R pod keeps plain TCP sockets: "+reason, "transparent", c.conf.SMCR.Transparent)
	return nil
}

// releaseTransparent unlists the pod's netns from the socket hook (the last
// one detaches the program). The hook knows a netns by its inode number,
// which the kernel gives again once the netns is gone: the key stays while
// another live attachment lists the same number (hookHolder), whose pod's
// TCP sockets it makes SMC.
func (p *Plugin) releaseTransparent(c *call, rec *state.Record) error {
	if rec.SMC == nil || rec.SMC.Transparent != config.TransparentBPF {
		return nil
	}
	holder, err := p.hookHolder(c, rec)
	if err != nil {
		return fmt.Errorf("unlist netns %s from the SMC socket hook: %w", rec.NetNS, err)
	}
	if holder != nil {
		c.log.Info("SMC-R: the netns inode stays listed in the SMC socket hook: another live attachment lists it",
			"record", rec.ContainerID, "netnsIno", rec.NetNSIno, "holder", holder.ContainerID, "holderNetns", holder.NetNS)
	} else if err := p.env.SMC.HookRemove(c.conf.SMCR.BPFFSDir, rec.NetNSIno); err != nil {
		return fmt.Errorf("unlist netns %s from the SMC socket hook: %w", rec.NetNS, err)
	}
	failpoint.Hit("del-smc-hook-unlisted")
	rec.SMC.Transparent = ""
	return nil
}

// hookHolder is another attachment that lists rec's netns inode in the
// socket hook and is alive: not of an earlier boot, and its netns there
// with the inode and cookie ADD recorded (one that cannot be looked at
// counts as alive). Only a key no such attachment lists is rec's to
// remove: the pod that died without a DEL and the one that later got its
// inode number list the same key.
func (p *Plugin) hookHolder(c *call, rec *state.Record) (*state.Record, error) {
	recs, err := p.listRecords(c)
	if err != nil {
		return nil, err
	}
	boot := p.bootID(c)
	for _, r := range recs {
		switch {
		case r.Key() == rec.Key() || r.SMC == nil || r.SMC.Transparent != config.TransparentBPF || r.NetNSIno != rec.NetNSIno:
		case r.BootOf(boot) == state.BootEarlier || p.netnsGone(c, r):
		default:
			return r, nil
		}
	}
	return nil, nil
}

// checkTransparent verifies the pod's netns is still listed in the hook.
func (p *Plugin) checkTransparent(c *call, rec *state.Record) error {
	if rec.SMC.Transparent != config.TransparentBPF {
		return nil
	}
	listed, err := p.env.SMC.HookListed(c.conf.SMCR.BPFFSDir, rec.NetNSIno)
	if err != nil {
		return err
	}
	if !listed {
		return fmt.Errorf("netns %s (inode %d) is not listed in the SMC socket hook", rec.NetNS, rec.NetNSIno)
	}
	return nil
}
