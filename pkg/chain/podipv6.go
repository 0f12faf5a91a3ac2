package chain

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// planPodRange derives, with podIPv6Block, the IPv6 block the link's pod
// interface takes its lease from: the block's host bits in its netdev's
// global /64. It runs before the link is recorded, so the record carries the
// range and DEL releases the lease through the same one.
func (p *Plugin) planPodRange(c *call, rec *state.Record, link *state.Link) error {
	block, ok := c.podBlock()
	if !ok || !c.leasing() || link.HostName == "" ||
		rec.Mode != rdma.ModeExclusive && c.sharedLink().Type == config.LinkNone {
		return nil
	}
	prefixes, err := p.env.Addrs.Prefixes(link.HostName)
	if err != nil {
		return cniError(CodeLinkSetup, "cannot read the addresses of netdev "+link.HostName, err)
	}
	rng, err := addr.PodRange(prefixes, block)
	if err != nil {
		return cniErrorf(CodePodIPv6, "no IPv6 for the pod on RDMA device %s: netdev %s has %v; podIPv6Block %s is placed in its global /64",
			link.Device, link.HostName, err, block)
	}
	link.IPAMRange = rng.String()
	return nil
}

// ipamStdinFor is the IPAM's conf for a lease from rng (a link's
// IPAMRange), or the configured one without podIPv6Block.
func ipamStdinFor(c *call, rng string) ([]byte, error) {
	if _, ok := c.conf.PodBlock(); !ok {
		return c.ipamStdin, nil
	}
	// rng may come from a record on disk: only an IPv6 prefix is rendered.
	pfx, err := netip.ParsePrefix(rng)
	if err != nil || !pfx.Addr().Is6() || pfx.Addr().Is4In6() {
		return nil, fmt.Errorf("podIPv6Block is set but the link records no IPv6 range (%q)", rng)
	}
	return c.conf.IPAMStdinRange(pfx.Masked().String())
}

// exhausted reports whether an IPAM's error says its range has no address
// left (host-local: "no IP addresses available in range set").
func exhausted(err error) bool {
	return strings.Contains(err.Error(), "no IP addresses available")
}

// anyPodRange is, with podIPv6Block, the range of the first offered device
// whose netdev has a global /64: for releases without a record (an IPAM
// keyed by container and interface releases from any of its ranges).
func (p *Plugin) anyPodRange(c *call) (string, bool) {
	block, _ := c.conf.PodBlock()
	devs, err := p.offered(c.conf)
	if c.conf.PodSoftRoCE != "" {
		devs, err = []rdma.Device{{Netdev: c.conf.PodSoftRoCE}}, nil
	}
	if err != nil {
		return "", false
	}
	for _, d := range devs {
		if d.Netdev == "" {
			continue
		}
		if prefixes, err := p.env.Addrs.Prefixes(d.Netdev); err == nil {
			if rng, err := addr.PodRange(prefixes, block); err == nil {
				return rng.String(), true
			}
		}
	}
	return "", false
}
