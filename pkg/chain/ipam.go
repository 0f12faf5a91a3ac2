package chain

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// ipamTimeout bounds one IPAM delegation.
const ipamTimeout = 30 * time.Second

// ipamRequest is the delegation for the pod-side interface ifName: the same
// container, netns, CNI_ARGS and CNI_PATH, the plugin's own conf as stdin
// (with podIPv6Block, its ipam ranges set to rng).
func ipamRequest(c *call, ifName, rng string) (addr.Request, error) {
	stdin, err := ipamStdinFor(c, rng)
	return addr.Request{
		PluginType: c.conf.IPAM.Type, NetConf: stdin,
		ContainerID: c.args.ContainerID, NetNS: c.args.Netns, IfName: ifName,
		Args: c.args.Args, Path: c.args.Path,
	}, err
}

// addressLink takes an IPAM lease for the link's pod interface, configures
// it there and returns the IPAM's result, without the node lock. The lease was recorded as
// planned before (under the lock), so a DEL after a crash, or the undo of a
// failed ADD, releases it (an IPAM that fails half-way may hold a lease, and
// its DEL is idempotent).
func (p *Plugin) addressLink(c *call, link *state.Link, podNS ns.NetNS) (*types100.Result, error) {
	req, err := ipamRequest(c, link.PodName, link.IPAMRange)
	if err != nil {
		return nil, cniError(CodeIPAM, "cannot render the IPAM configuration of "+link.PodName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipamTimeout)
	defer cancel()
	res, err := p.env.IPAM.Add(ctx, req)
	if err != nil {
		// The IPAM's own code means nothing to the runtime in our name,
		// but its "try again" does.
		code := CodeIPAM
		var te *types.Error
		if errors.As(err, &te) && te.Code == types.ErrTryAgainLater {
			code = te.Code
		}
		if link.IPAMRange != "" && exhausted(err) {
			return nil, types.NewError(CodePodIPv6, fmt.Sprintf("IPv6 block %s of netdev %s (RDMA device %s) is exhausted",
				link.IPAMRange, link.HostName, link.Device), err.Error())
		}
		return nil, types.NewError(code, fmt.Sprintf("IPAM %s failed for %s", req.PluginType, link.PodName), err.Error())
	}
	failpoint.Hit("add-ipam-lease-taken")
	syncLeases(c, link, res)
	if err := p.env.Addrs.Configure(podNS, link.PodName, res, addr.Options{DAD: c.conf.DAD}); err != nil {
		return nil, cniError(CodeLinkSetup, "cannot address "+link.PodName+" in the pod", err)
	}
	failpoint.Hit("add-addresses-configured")
	for _, ip := range res.IPs {
		link.IPs = append(link.IPs, ip.Address.String())
	}
	// A pod's own rxe device (podSoftRoCE) sends from the pod netns's
	// socket: it needs no route on the host (measured on 7.3).
	if link.Kind != state.LinkMoved && !link.SoftRoCE {
		if w := p.env.Addrs.HostRouteWarning(link.HostName, res.IPs); w != "" {
			c.log.Warn(w)
		}
	}
	return res, nil
}

// syncLeases puts host-local's lease files for res on disk before ADD
// goes on (addr.SyncHostLocalLeases says why). A lease that cannot be
// synced is still held: the ADD goes on, and the warning says what a power
// loss may then cost.
func syncLeases(c *call, link *state.Link, res *types100.Result) {
	dir := c.conf.HostLocalDataDir()
	if dir == "" {
		return
	}
	var ips []netip.Addr
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			ips = append(ips, a.Unmap())
		}
	}
	if err := addr.SyncHostLocalLeases(dir, c.conf.Name, ips); err != nil {
		c.log.Warn("IPAM lease not synced to disk: after a power loss host-local may keep it empty and never release it", "ifname", link.PodName, "error", err)
	}
}

// releaseLease runs the IPAM's DEL for req. An IPAM plugin that is not in
// CNI_PATH holds nothing it could release (an ADD that failed to find it
// took nothing): that is logged, never an error that blocks DEL forever.
func (p *Plugin) releaseLease(c *call, req addr.Request) error {
	ctx, cancel := context.WithTimeout(context.Background(), ipamTimeout)
	defer cancel()
	err := p.env.IPAM.Del(ctx, req)
	if errors.Is(err, addr.ErrPluginNotFound) {
		c.log.Warn("IPAM plugin not found: nothing to release through it", "holder", req.ContainerID, "ifname", req.IfName, "error", err)
		return nil
	}
	return err
}

// releaseLeases releases, without the node lock, the IPAM leases rec holds
// (the netns may be gone) and clears them in rec (in memory).
func (p *Plugin) releaseLeases(c *call, rec *state.Record) error {
	var errs []error
	for i := range rec.Links {
		l := &rec.Links[i]
		if !l.IPAM {
			continue
		}
		if rec.Network != c.conf.Name || !c.conf.HasIPAM() {
			// Failing would block the sandbox's removal forever; the
			// lease can only be recovered through the IPAM now.
			c.log.Warn("IPAM lease recorded but this conf has no ipam section for it: not released",
				"holder", rec.ContainerID, "ifname", l.PodName, "network", rec.Network)
			l.IPAM, l.IPs = false, nil
			continue
		}
		req, err := ipamRequest(c, l.PodName, l.IPAMRange)
		if err != nil {
			// As above: no configuration can release it through this conf.
			c.log.Warn("IPAM lease recorded but its range cannot be rendered: not released",
				"holder", rec.ContainerID, "ifname", l.PodName, "error", err)
			l.IPAM, l.IPs = false, nil
			continue
		}
		req.ContainerID, req.NetNS = rec.ContainerID, ""
		if err := p.releaseLease(c, req); err != nil {
			errs = append(errs, fmt.Errorf("IPAM %s lease of %s: %w", req.PluginType, l.PodName, err))
			continue
		}
		failpoint.Hit("del-ipam-lease-released")
		l.IPAM, l.IPs = false, nil
	}
	return errors.Join(errs...)
}

// releaseInferredLeases releases, after an unreadable record was
// quarantined, the leases the pod may hold: one per offered device (at
// least one), named as the entry names the pod's RDMA interfaces; a lease
// taken under a claim configuration's ifName is not among them (only an
// IPAM's GC frees it). An IPAM's DEL of a lease it does not hold changes
// nothing.
func (p *Plugin) releaseInferredLeases(c *call) error {
	if !c.conf.HasIPAM() {
		return nil
	}
	rng := ""
	if _, block := c.conf.PodBlock(); block {
		var ok bool
		if rng, ok = p.anyPodRange(c); !ok {
			c.log.Warn("podIPv6Block: no offered device's netdev has a global /64 to render the IPAM's range: leases not released")
			return nil
		}
	}
	n := min(max(len(c.conf.Devices), 1), 8)
	var errs []error
	for i := range n {
		req, err := ipamRequest(c, c.conf.PodIfName(i), rng)
		if err != nil {
			return leaseError(err)
		}
		req.NetNS = ""
		if err := p.releaseLease(c, req); err != nil {
			errs = append(errs, err)
		}
	}
	return leaseError(errors.Join(errs...))
}

// gcLeases lets an IPAM that implements GC drop leases of attachments the
// plugin no longer records. Leases are keyed by the pod-side RDMA names.
func (p *Plugin) gcLeases(c *call, kept []*state.Record) error {
	if !c.conf.HasIPAM() {
		return nil
	}
	// The runtime's own list too: an IPAM keyed by network name may hold
	// the primary's leases as well.
	valid := c.conf.ValidAttachments()
	var ranges []string
	for _, r := range kept {
		for _, l := range r.Links {
			if l.IPAM {
				valid = append(valid, types.GCAttachment{ContainerID: r.ContainerID, IfName: l.PodName})
				if l.IPAMRange != "" && !slices.Contains(ranges, l.IPAMRange) {
					ranges = append(ranges, l.IPAMRange)
				}
			}
		}
	}
	stdin, err := gcStdin(c, ranges)
	if err != nil || stdin == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipamTimeout)
	defer cancel()
	req := addr.Request{PluginType: c.conf.IPAM.Type, NetConf: stdin, Path: c.args.Path}
	if err := p.env.IPAM.GC(ctx, req, valid); err != nil {
		return fmt.Errorf("IPAM %s GC: %w", req.PluginType, err)
	}
	return nil
}

// gcStdin is the IPAM's conf for GC. With podIPv6Block it has one range
// set per range the kept attachments recorded, since an IPAM needs some to
// parse its conf; it is nil when there is none, as nothing is held and
// there is nothing to collect.
func gcStdin(c *call, ranges []string) ([]byte, error) {
	if _, ok := c.conf.PodBlock(); !ok {
		return c.ipamStdin, nil
	}
	if len(ranges) == 0 {
		c.log.Info("podIPv6Block: no kept attachment records a range: IPAM GC not delegated")
		return nil, nil
	}
	for _, r := range ranges {
		if _, err := ipamStdinFor(c, r); err != nil {
			return nil, err
		}
	}
	return c.conf.IPAMStdinRange(ranges...)
}
