// Package netnstest builds throwaway network namespaces and netdevs for the
// privileged test tiers and reads back what the kernel holds, so tests assert
// on observable kernel state.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// NewNS creates a netns that is closed and unmounted when t ends.
func NewNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { Delete(n) })
	return n
}

// Delete closes and unpins n; the kernel then destroys the netns. A
// failure is left to leakcheck, which names the pin. Idempotent.
func Delete(n ns.NetNS) {
	_ = n.Close()
	_ = Unpin(n.Path())
}

// Unpin removes the netns pin at path as `ip netns del` does: it detaches
// the bind mount (MNT_DETACH) and removes the file. A plain unmount, CNI
// testutils.UnmountNS's, fails with EBUSY while any process holds the pin
// open, as a child a concurrent test forked holds every open file of the
// test binary until it execs, and leaves the pin behind.
func Unpin(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns pin %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns pin %s: %w", path, err)
	}
	return nil
}

// AddVeth creates veth name in host with its peer name+"p" in peer (so
// deleting other netns never destroys it), sets mtu, adds addrs (CIDRs, IPv6
// without DAD) and brings both ends up. It stands in for an RDMA netdev.
func AddVeth(t testing.TB, host, peer ns.NetNS, name string, mtu int, addrs ...string) {
	t.Helper()
	err := host.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu},
			PeerName:  name + "p", PeerNamespace: netlink.NsFd(int(peer.Fd())),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if err := AddAddrTo(l, a); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(l)
	})
	if err == nil {
		err = peer.Do(func(ns.NetNS) error {
			p, err := netlink.LinkByName(name + "p")
			if err != nil {
				return err
			}
			return netlink.LinkSetUp(p)
		})
	}
	if err != nil {
		t.Fatalf("veth %s: %v", name, err)
	}
}

// AddAddr adds cidr (IPv6 without DAD) to netdev name in netns n.
func AddAddr(t testing.TB, n ns.NetNS, name, cidr string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return AddAddrTo(l, cidr)
	})
	if err != nil {
		t.Fatalf("address %s on %s: %v", cidr, name, err)
	}
}

// AddAddrTo adds cidr to l in the caller's netns, IPv6 without DAD.
func AddAddrTo(l netlink.Link, cidr string) error {
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if addr.IP.To4() == nil {
		addr.Flags = unix.IFA_F_NODAD
	}
	return netlink.AddrAdd(l, addr)
}

// Link is what the kernel holds for one netdev.
type Link struct {
	Name   string
	Kind   string
	MTU    int
	MAC    string
	Up     bool
	Addrs  []string // global-scope CIDRs, sorted
	Routes []string // routes through it not made by the kernel, all tables, sorted
}

// Snapshot reads netdev name in netns n; ok is false when it does not exist.
func Snapshot(t testing.TB, n ns.NetNS, name string) (Link, bool) {
	t.Helper()
	var out Link
	found := false
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return nil
		}
		found = true
		a := l.Attrs()
		out = Link{Name: a.Name, Kind: l.Type(), MTU: a.MTU, MAC: a.HardwareAddr.String(), Up: a.Flags&net.FlagUp != 0}
		addrs, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, ad := range addrs {
			if ad.Scope == int(netlink.SCOPE_UNIVERSE) {
				out.Addrs = append(out.Addrs, ad.IPNet.String())
			}
		}
		sort.Strings(out.Addrs)
		out.Routes, err = routes(l)
		return err
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", name, err)
	}
	return out, found
}

func routes(l netlink.Link) ([]string, error) {
	filter := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}
	list, err := nldump.RouteListFiltered(nil, netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	var out []string
	for _, r := range list {
		if r.Protocol != unix.RTPROT_KERNEL && r.Table != unix.RT_TABLE_LOCAL && r.Type == unix.RTN_UNICAST {
			out = append(out, fmt.Sprintf("%s via %s table %d metric %d", r.Dst, r.Gw, r.Table, r.Priority))
		}
	}
	sort.Strings(out)
	return out, err
}

// AddRoute adds a route to dst via gw through netdev name in netns n, in
// table (0: main) with metric.
func AddRoute(t testing.TB, n ns.NetNS, name, dst, gw string, table, metric int) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		_, d, err := net.ParseCIDR(dst)
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: d, Gw: net.ParseIP(gw), Table: table, Priority: metric})
	})
	if err != nil {
		t.Fatalf("route %s via %s: %v", dst, gw, err)
	}
}

// Names lists the netdevs of netns n, sorted.
func Names(t testing.TB, n ns.NetNS) []string {
	t.Helper()
	var names []string
	err := n.Do(func(ns.NetNS) error {
		links, err := nldump.LinkList(nil)
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if err != nil {
		t.Fatalf("list links: %v", err)
	}
	sort.Strings(names)
	return names
}

// GlobalV6 lists the global IPv6 addresses (CIDR form) of link name in
// netns n; a failure to read them fails t.
func GlobalV6(t testing.TB, n ns.NetNS, name string) []string {
	t.Helper()
	var out []string
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		addrs, err := nldump.AddrList(nil, l, netlink.FAMILY_V6)
		for _, a := range addrs {
			if a.IP.IsGlobalUnicast() {
				out = append(out, a.IPNet.String())
			}
		}
		return err
	})
	if err != nil {
		t.Errorf("read %s's addresses in the pod: %v", name, err)
	}
	return out
}

// WithoutNetAdmin runs f on the calling goroutine's thread with
// CAP_NET_ADMIN dropped from the thread's effective set (capabilities are
// per thread), so the kernel refuses f what needs it in another netns
// (EACCES). The thread is locked for f; it gets the capability back after,
// or, when that fails, dies with the goroutine instead of serving others.
func WithoutNetAdmin(f func() error) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capget: %w", err)
	}
	saved := data
	data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capset: %w", err)
	}
	ferr := f()
	if err := unix.Capset(&hdr, &saved[0]); err != nil {
		return fmt.Errorf("capset back (the thread is dropped): %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
