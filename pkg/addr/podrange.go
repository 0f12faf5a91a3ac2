package addr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoGlobal64 reports that a netdev has no global IPv6 /64 to place a
// pod's block in.
var ErrNoGlobal64 = errors.New("no global IPv6 /64")

// PodRange places block (host bits, e.g. ::f:0:c00/124) in the one global
// /64 that addrs (a netdev's addresses) lie in: the /64's upper 64 bits,
// the block's lower 64 bits and length. Addresses longer than /64 (a /128
// from DHCPv6) say nothing about the on-link /64 and are skipped; several
// distinct /64s are ambiguous and refused.
func PodRange(addrs []netip.Prefix, block netip.Prefix) (netip.Prefix, error) {
	var nets []netip.Prefix
	for _, a := range addrs {
		ip := a.Addr()
		if !ip.Is6() || ip.Is4In6() || !ip.IsGlobalUnicast() || a.Bits() > 64 {
			continue
		}
		n := netip.PrefixFrom(ip, 64).Masked()
		if !slices.Contains(nets, n) {
			nets = append(nets, n)
		}
	}
	switch len(nets) {
	case 0:
		return netip.Prefix{}, ErrNoGlobal64
	case 1:
	default:
		return netip.Prefix{}, fmt.Errorf("several global IPv6 /64s (%v): which one pods take is ambiguous", nets)
	}
	hi, lo := nets[0].Addr().As16(), block.Addr().As16()
	copy(hi[8:], lo[8:])
	return netip.PrefixFrom(netip.AddrFrom16(hi), block.Bits()), nil
}

// NetdevPrefixes lists the IPv6 addresses of global scope, with their
// prefix lengths, of netdev name in the calling thread's CURRENT netns.
func NetdevPrefixes(name string) ([]netip.Prefix, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("netdev %q: %w", name, err)
	}
	addrs, err := hostAddrs(link)
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != unix.RT_SCOPE_UNIVERSE || ip.Unmap().Is4() {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	return out, nil
}
