package smcr

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

const (
	noSMCDevice = 0x03030000 // SMC_CLC_DECL_NOSMCDEV: the client found no SMC device, proposed nothing
	// nodeV4 to nodeV6GID are veth0's addresses in the pods' subnets, and
	// their GIDs as sysfs writes them. SMC-Rv2 picks a RoCE v2 GID whose
	// netdev has an IPv4 in the subnet of the socket's source address
	// (net/smc/smc_ib.c smc_ib_determine_gid_rcu, inet_ifa_match); the
	// pods keep their ptp host routes, which are more specific.
	nodeV4    = "10.99.0.250/24"
	nodeV4GID = "0000:0000:0000:0000:0000:ffff:0a63:00fa"
	nodeV6    = "fd00:99::fa/64"
	nodeV6GID = "fd00:0099:0000:0000:0000:0000:0000:00fa"
)

// fallbacks are the counters the RC-SMCR lines compare: pod1's client
// total, pod4's server total, and pod1's client count of 0x03030000.
type fallbacks struct{ client, server, noDev uint64 }

func (f fallbacks) totals() string { return fmt.Sprintf("%d %d", f.client, f.server) }

// verdict returns smc-r when neither side counted a fallback between
// two readings, else tcp.
func verdict(before, after fallbacks) string {
	if before.client == after.client && before.server == after.server {
		return "smc-r"
	}
	return "tcp"
}

// connections runs the AF_SMC exchanges from pod1 to pod4: over IPv4 as
// set up (veth0 has no address in the pods' subnet), then with one, then
// over IPv6 with one in the pods' IPv6 subnet too; it logs the RC-SMCR
// facts docs/kernels.md's "SMC-R and IPv6" table holds.
func (s *scenario) connections(t *testing.T) {
	pod4 := s.pods[3]
	a4, err := podAddr(pod4.NetNS, netlink.FAMILY_V4)
	t.Logf("%s eth0 %v %v", pod4.Name, a4, err)
	f0, err0 := s.connect(t, "plain", netip.AddrPortFrom(a4, 7777))
	t.Logf("client 0x%08x (no SMC device) count after the first connection: %d", noSMCDevice, f0.noDev)
	guestkit.Check(t, "node-gid", func() error { return nodeAddr(nodeV4, nodeV4GID) })
	logGIDs(t)
	f1, err1 := s.connect(t, "node-in-pod-subnet", netip.AddrPortFrom(a4, 7778))
	guestkit.Check(t, "client-not-no-smc-device", func() error {
		if err := errors.Join(err0, err1); err != nil {
			return err
		}
		if f1.noDev != f0.noDev {
			return fmt.Errorf("pod1's client fell back with 0x%08x (no SMC device) again: %d -> %d", noSMCDevice, f0.noDev, f1.noDev)
		}
		return nil
	})
	t.Logf("RC-SMCR ipv4 %s totals %s -> %s no-smc-device %d -> %d", verdict(f0, f1), f0.totals(), f1.totals(), f0.noDev, f1.noDev)
	var a6 netip.Addr
	guestkit.Check(t, "pod-ipv6", func() (err error) {
		a6, err = podIPv6(pod4.NetNS)
		return err
	})
	t.Logf("%s eth0 %v", pod4.Name, a6)
	guestkit.Check(t, "node-gid-ipv6", func() error { return nodeAddr(nodeV6, nodeV6GID) })
	f2, err2 := s.connect(t, "ipv6", netip.AddrPortFrom(a6, 7779))
	v6 := verdict(f1, f2)
	t.Logf("RC-SMCR ipv6 %s totals %s -> %s no-smc-device %d -> %d", v6, f1.totals(), f2.totals(), f1.noDev, f2.noDev)
	// On every kernel with SMC the IPv6 client finds no SMC-R device
	// where the IPv4 one found rxe0, and the connection goes on as TCP.
	guestkit.Check(t, "ipv6-falls-back-no-smc-device", func() error {
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if v6 != "tcp" || f2.noDev != f1.noDev+1 {
			return fmt.Errorf("IPv6: %s, client 0x%08x %d -> %d (want tcp, one more): SMC-R and IPv6 changed on this kernel; update docs/kernels.md", v6, noSMCDevice, f1.noDev, f2.noDev)
		}
		return nil
	})
	for _, a := range []string{nodeV6, nodeV4} {
		if err := delNodeAddr(a); err != nil {
			t.Errorf("remove %s from %s: %v", a, rxeNetdev, err)
		}
	}
	r, err := fallbackReport("")
	t.Logf("init_net fallbacks: %s / %s %v", reasons(r, false), reasons(r, true), err)
}

// connect is one exchange (af-smc-NAME) to pod4's address ap, then both
// pods' fallback counters, with an error if they cannot be read.
func (s *scenario) connect(t *testing.T, name string, ap netip.AddrPort) (fallbacks, error) {
	pod1, pod4 := s.pods[0], s.pods[3]
	guestkit.Check(t, "af-smc-"+name, func() error { return exchange(t, pod1.NetNS, pod4.NetNS, ap) })
	c, cerr := fallbackReport(pod1.NetNS)
	sv, serr := fallbackReport(pod4.NetNS)
	t.Logf("fallback reasons so far: client(%s): %s / server(%s): %s", pod1.Name, reasons(c, false), pod4.Name, reasons(sv, true))
	f := fallbacks{client: c.ClientTotal, server: sv.ServerTotal}
	for _, r := range c.Reasons {
		if !r.Server && r.Reason == noSMCDevice {
			f.noDev = r.Count
		}
	}
	if err := errors.Join(cerr, serr); err != nil {
		return f, fmt.Errorf("fallback counters after af-smc-%s: %w", name, err)
	}
	return f, nil
}

// fallbackReport reads the SMC fallback statistics of the netns at nsPath
// ("": init_net).
func fallbackReport(nsPath string) (r smc.FallbackReport, err error) {
	err = smc.Do(nsPath, func(c *smc.Client) (err error) {
		r, err = c.FallbackReport()
		return err
	})
	if err != nil {
		err = fmt.Errorf("SMC fallback statistics of %q: %w", nsPath, err)
	}
	return r, err
}

// reasons lists one side's reason codes, for the log.
func reasons(r smc.FallbackReport, server bool) string {
	side, total := "client", r.ClientTotal
	if server {
		side, total = "server", r.ServerTotal
	}
	out := []string{fmt.Sprintf("%s total=%d", side, total)}
	for _, s := range r.Reasons {
		if s.Server == server {
			out = append(out, fmt.Sprintf("%s reason=0x%08x count=%d", side, s.Reason, s.Count))
		}
	}
	return strings.Join(out, "; ")
}

// podAddr is the first global address of family on eth0 in the netns at
// path.
func podAddr(path string, family int) (a netip.Addr, err error) {
	err = guestkit.InPod(path, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		as, err := nldump.AddrList(nil, l, family)
		if err != nil {
			return err
		}
		for _, x := range as {
			if x.Scope == unix.RT_SCOPE_UNIVERSE && x.Flags&unix.IFA_F_TENTATIVE == 0 {
				a, _ = netip.AddrFromSlice(x.IP)
				a = a.Unmap()
				return nil
			}
		}
		return fmt.Errorf("no usable global address of family %d on eth0: %v", family, as)
	})
	return a, err
}

// podIPv6 polls until pod4's eth0 has a global IPv6 address in the
// primary's fd00:99::/64 that is no longer tentative (DAD runs in the pod).
func podIPv6(path string) (a netip.Addr, err error) {
	want := netip.MustParsePrefix("fd00:99::/64")
	err = guestkit.Poll(15*time.Second, 100*time.Millisecond, func() (err error) {
		a, err = podAddr(path, netlink.FAMILY_V6)
		if err == nil && !want.Contains(a) {
			err = fmt.Errorf("eth0's IPv6 %s is not in %s", a, want)
		}
		return err
	})
	return a, err
}

// nodeAddr gives veth0 cidr (IPv6 without DAD) and polls until rxe adds
// its GID on veth0 (through a netdev event, asynchronously).
func nodeAddr(cidr, gid string) error {
	l, err := netlink.LinkByName(rxeNetdev)
	if err != nil {
		return err
	}
	if err := netnstest.AddAddrTo(l, cidr); err != nil {
		return fmt.Errorf("add %s to %s: %w", cidr, rxeNetdev, err)
	}
	return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
		gs, err := rdma.New().GIDs()
		if err != nil {
			return fmt.Errorf("GIDs: %w", err)
		}
		for _, g := range gs {
			if g.Device == rxe && g.Port == 1 && g.GID == gid && g.Netdev == rxeNetdev {
				return nil
			}
		}
		return fmt.Errorf("no GID %s on %s for %s in %s port 1", gid, rxeNetdev, cidr, rxe)
	})
}

func delNodeAddr(cidr string) error {
	l, err := netlink.LinkByName(rxeNetdev)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	return netlink.AddrDel(l, a)
}

// logGIDs logs rxe0's port 1 GIDs, as lib.sh's gid_rows printed them.
func logGIDs(t *testing.T) {
	gs, err := rdma.New().GIDs()
	for _, g := range gs {
		if g.Device == rxe && g.Port == 1 {
			t.Logf("%s GID %d %s %s %s", rxe, g.Index, g.GID, g.Type, g.Netdev)
		}
	}
	if err != nil {
		t.Logf("%s GIDs: %v", rxe, err)
	}
}
