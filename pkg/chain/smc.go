package chain

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// setupSMC writes the SMC-R pnet table for a pod annotated
// network.alibabacloud.com/erdma-smcr=true: {PNETID, RDMA device, port 1} in
// init_net (IB entries exist only there) and {PNETID, the pod's primary
// interface} in the pod netns. The pod's first RDMA device carries it.
func (p *Plugin) setupSMC(c *call, draft *draftRecord, devs []rdma.Device, podNS ns.NetNS) error {
	if !c.smcrOn() || len(devs) == 0 {
		return nil
	}
	// draft.SMC is saved before the first change it guards: by
	// ensureHostPnet before it writes the init_net entry, else with the
	// pod's entry below (each write of the record costs ADD time).
	draft.SMC = &state.SMC{PnetID: pnetIDFor(c.conf.SMCR.PnetID, devs[0]), Device: devs[0].Name, IBPort: 1, PodIfName: c.args.IfName}
	if err := p.ensureHostPnet(c, draft); err != nil {
		if errors.Is(err, smc.ErrUnavailable) && c.conf.SMCR.OnUnsupported == "warn" {
			c.log.Warn("SMC-R requested but unavailable: pod keeps plain TCP", "error", err)
			draft.SMC = nil
			return p.save(c, draft)
		}
		return cniError(CodeSMC, "cannot write the SMC-R pnet entry of "+devs[0].Name, err)
	}
	listHook, err := p.pickTransparent(c, draft, podNS.Path())
	if err != nil {
		return err
	}
	// The pod's entry and its hook listing are recorded before either is
	// made, in one write: DEL after a crash in between, or the undo of a
	// failed ADD, removes them (removing an absent entry or unlisting a
	// netns not listed changes nothing).
	podEntry := smc.PnetEntry{PnetID: draft.SMC.PnetID, EthName: draft.SMC.PodIfName}
	draft.SMC.PodEntry = true
	if err := p.save(c, draft); err != nil {
		return err
	}
	if _, err := p.env.SMC.EnsurePnet(podNS.Path(), podEntry); err != nil {
		return cniError(CodeSMC, "cannot write the pod's SMC-R pnet entry for "+podEntry.EthName, err)
	}
	failpoint.Hit("add-smc-pod-entry")
	if listHook {
		if err := p.listInHook(c, draft, podNS.Path()); err != nil {
			return err
		}
	}
	return p.ensureUEID(c)
}

// ensureHostPnet makes the init_net entry exist and records draft's reference
// to it, which releaseHostPnet drops. An entry the plugin finds already there (another
// tool's, or another PNETID on the port) is adopted and never removed by the
// plugin (the reference is saved with the pod's entry, the next change);
// one it writes is recorded as its own before it is written, so a crash in
// between leaves a record DEL can clean up with.
func (p *Plugin) ensureHostPnet(c *call, draft *draftRecord) error {
	refs, err := p.hostPnetRefs(c, draft.Record)
	if err != nil {
		return err
	}
	want := smc.PnetEntry{PnetID: draft.SMC.PnetID, IBName: draft.SMC.Device, IBPort: draft.SMC.IBPort}
	var existing *smc.PnetEntry
	if len(refs) > 0 {
		existing = &smc.PnetEntry{PnetID: refs[0].SMC.PnetID}
	} else if existing, err = p.existingHostPnet(want); err != nil {
		return err
	}
	draft.SMC.HostEntry, draft.SMC.HostOwned = true, existing == nil
	if existing != nil {
		draft.SMC.PnetID = existing.PnetID
		return nil
	}
	if err := p.save(c, draft); err != nil {
		return err
	}
	got, err := p.env.SMC.EnsurePnet("", want)
	var conflict *smc.ConflictError
	if errors.As(err, &conflict) {
		c.log.Info("SMC-R: adopting the PNETID already on the port", "device", want.IBName, "pnetId", conflict.Existing.PnetID)
		got, err, draft.SMC.HostOwned = conflict.Existing, nil, false
	}
	if err != nil {
		return err
	}
	failpoint.Hit("add-smc-host-entry")
	draft.SMC.PnetID = got.PnetID
	return p.save(c, draft)
}

func (p *Plugin) existingHostPnet(want smc.PnetEntry) (*smc.PnetEntry, error) {
	entries, err := p.env.SMC.PnetEntries("")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IBName == want.IBName && (e.IBPort == want.IBPort || e.IBPort == 0) {
			return &e, nil
		}
	}
	return nil, nil
}

// ensureUEID adds smcr.ueid, when configured.
func (p *Plugin) ensureUEID(c *call) error {
	if c.conf.SMCR.UEID == "" {
		return nil
	}
	if err := p.env.SMC.EnsureUEID(c.conf.SMCR.UEID); err != nil {
		return cniError(CodeSMC, "cannot add SMC UEID "+c.conf.SMCR.UEID, err)
	}
	return nil
}

// releaseSMC removes the pod entry (when nsPath is still the pod's netns)
// and the init_net entry when no other attachment uses it.
func (p *Plugin) releaseSMC(c *call, rec *state.Record, nsPath string) error {
	if rec.SMC == nil {
		return nil
	}
	if err := p.releaseTransparent(c, rec); err != nil {
		return err
	}
	if rec.SMC.PodEntry && nsPath != "" && p.isPodNetns(c, rec, nsPath) {
		err := p.env.SMC.RemovePnet(nsPath, smc.PnetEntry{PnetID: rec.SMC.PnetID, EthName: rec.SMC.PodIfName})
		if err != nil && !errors.Is(err, smc.ErrUnavailable) {
			return fmt.Errorf("remove pod SMC-R pnet entry: %w", err)
		}
	}
	rec.SMC.PodEntry = false
	if err := p.releaseHostPnet(c, rec); err != nil {
		return err
	}
	rec.SMC = nil
	return nil
}

// releaseHostPnet drops rec's reference to the init_net entry; the last
// reference removes an entry the plugin wrote, and ownership passes on.
// The references are the other records that still need the entry
// (hostPnetRefs): an entry none of them needs serves no pod, whichever
// boot rec was made in (one of unknown boot may be of this boot: a record
// of the previous release).
func (p *Plugin) releaseHostPnet(c *call, rec *state.Record) error {
	if rec.SMC == nil || !rec.SMC.HostEntry {
		return nil
	}
	refs, err := p.hostPnetRefs(c, rec)
	if err != nil {
		return err
	}
	switch {
	case len(refs) > 0 && rec.SMC.HostOwned:
		refs[0].SMC.HostOwned = true
		if err := c.store.Put(refs[0]); err != nil {
			return err
		}
	case len(refs) == 0 && rec.SMC.HostOwned:
		err := p.env.SMC.RemovePnet("", smc.PnetEntry{PnetID: rec.SMC.PnetID, IBName: rec.SMC.Device, IBPort: rec.SMC.IBPort})
		if err != nil && !errors.Is(err, smc.ErrUnavailable) {
			return fmt.Errorf("remove SMC-R pnet entry of %s: %w", rec.SMC.Device, err)
		}
	}
	rec.SMC.HostEntry, rec.SMC.HostOwned = false, false
	return nil
}

// hostPnetRefs are the other attachments of this boot holding rec's
// device's init_net entry: one of an earlier boot held an entry that died
// with it, and one of unknown boot counts only while its netns lives (which
// makes it this boot's).
func (p *Plugin) hostPnetRefs(c *call, rec *state.Record) ([]*state.Record, error) {
	recs, err := c.store.List()
	if err != nil && len(recs) == 0 {
		return nil, err
	}
	boot := p.bootID(c)
	var out []*state.Record
	for _, r := range recs {
		if r.Key() == rec.Key() || r.SMC == nil || !r.SMC.HostEntry || r.SMC.Device != rec.SMC.Device {
			continue
		}
		switch r.BootOf(boot) {
		case state.BootEarlier:
		case state.BootUnknown:
			if !p.netnsGone(c, r) {
				out = append(out, r)
			}
		default:
			out = append(out, r)
		}
	}
	return out, nil
}

// isPodNetns reports whether nsPath names rec's pod netns (the inode and
// cookie ADD recorded), where its pod pnet entry is: the entry of a netns
// that is gone went with it, and a netns now at the path is another pod's.
// One that cannot be told is left alone (its entry dies with it).
func (p *Plugin) isPodNetns(c *call, rec *state.Record, nsPath string) bool {
	at := *rec
	at.NetNS = nsPath
	gone, err := at.NetnsGone(p.env.Netns.ID)
	if err != nil {
		c.log.Warn("cannot tell whether the netns is the pod's: its SMC-R pnet entry is left", "netns", nsPath, "error", err)
	}
	return err == nil && !gone
}

// checkSMC verifies both pnet entries through the kernel's dumps.
func (p *Plugin) checkSMC(c *call, rec *state.Record) error {
	if rec.SMC == nil {
		return nil
	}
	if err := p.checkTransparent(c, rec); err != nil {
		return err
	}
	want := []struct {
		ns    string
		entry smc.PnetEntry
		on    bool
	}{
		{"", smc.PnetEntry{PnetID: rec.SMC.PnetID, IBName: rec.SMC.Device, IBPort: rec.SMC.IBPort}, rec.SMC.HostEntry},
		{c.args.Netns, smc.PnetEntry{PnetID: rec.SMC.PnetID, EthName: rec.SMC.PodIfName}, rec.SMC.PodEntry},
	}
	for _, w := range want {
		if !w.on {
			continue
		}
		entries, err := p.env.SMC.PnetEntries(w.ns)
		if err != nil {
			return err
		}
		if !containsPnet(entries, w.entry) {
			return fmt.Errorf("SMC-R pnet entry %s missing", w.entry)
		}
	}
	return nil
}

func containsPnet(list []smc.PnetEntry, e smc.PnetEntry) bool {
	for _, x := range list {
		if strings.EqualFold(x.PnetID, e.PnetID) && x.EthName == e.EthName && x.IBName == e.IBName &&
			(e.IBName == "" || x.IBPort == e.IBPort || x.IBPort == 0) {
			return true
		}
	}
	return false
}

// pnetIDFor is the configured PNETID, else the device's MAC as encoded in
// its EUI-64 node GUID (an eRDMA device's ENI MAC, as
// alibabacloud-erdma-controller names it), else its name.
func pnetIDFor(configured string, d rdma.Device) string {
	if configured != "" {
		return strings.ToUpper(configured)
	}
	if mac, err := rdma.MACFromGUID(d.NodeGUID); err == nil {
		return smc.PnetIDFromMAC(mac)
	}
	var b strings.Builder
	for _, r := range strings.ToUpper(d.Name) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	id := b.String()
	if len(id) > 16 {
		id = id[:16]
	}
	return id
}
