package guestkit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// Node is what DEL and GC must leave as it was: init_net's links (name,
// MTU, MAC, flags), addresses, routes of every table, the RDMA devices
// with their netdev and ports, their GIDs, the SMC pnet table, and the
// files of the plugin's records and the IPAM leases. One line per fact,
// sorted, so two readings compare line by line.
type Node []string

// ReadNode reads the node; dirs are the state and lease directories.
func ReadNode(dirs ...string) (Node, error) {
	return collect(netdevs, rdmaFacts, func() ([]string, error) { return Files(dirs...) })
}

// Owned is what rdma-chain changes for a pod: the NIC, the RDMA devices,
// GIDs, both pnet tables, rdma0's addresses in the pod, and its files.
func Owned(nic, podNS string, dirs ...string) (Node, error) {
	return collect(func() ([]string, error) { return nicFacts(nic) }, rdmaFacts,
		func() ([]string, error) { return podLines(podNS) },
		func() ([]string, error) { return Files(dirs...) })
}

// collect runs each reader and sorts what they read.
func collect(readers ...func() ([]string, error)) (Node, error) {
	var lines []string
	for _, read := range readers {
		l, err := read()
		if err != nil {
			return nil, err
		}
		lines = append(lines, l...)
	}
	slices.Sort(lines)
	return lines, nil
}

// nicFacts describes the NIC's link and addresses, or says that init_net
// lacks it.
func nicFacts(nic string) ([]string, error) {
	l, err := netlink.LinkByName(nic)
	if err != nil {
		return []string{fmt.Sprintf("link %s: %v", nic, err)}, nil
	}
	a, err := LinkAddrs(l)
	return append(a, linkLine(l)), err
}

// rdmaFacts describes the RDMA devices init_net sees, their GIDs and its
// pnet table.
func rdmaFacts() ([]string, error) {
	return collect(rdmaDevices, gids, func() ([]string, error) { return Pnet("") })
}

// podLines describes the pod's pnet table and rdma0's addresses in it.
func podLines(podNS string) ([]string, error) {
	lines, err := Pnet(podNS)
	if err != nil {
		return nil, err
	}
	for i := range lines {
		lines[i] = "pod " + lines[i]
	}
	err = ns.WithNetNSPath(podNS, func(ns.NetNS) error {
		l, err := netlink.LinkByName("rdma0")
		if err != nil {
			lines = append(lines, "pod rdma0: absent")
			return nil
		}
		a, err := LinkAddrs(l)
		for _, s := range a {
			lines = append(lines, "pod "+s)
		}
		return err
	})
	return lines, err
}

func linkLine(l netlink.Link) string {
	a := l.Attrs()
	return fmt.Sprintf("link %s mtu=%d %s=%s flags=%#x", a.Name, a.MTU, a.EncapType, a.HardwareAddr, a.RawFlags)
}

// netdevs describes init_net's links, their addresses and the routes of every
// table (local and the policy tables too), from one link dump.
func netdevs() ([]string, error) {
	ls, err := nldump.LinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	var out []string
	names := map[int]string{}
	for _, l := range ls {
		names[l.Attrs().Index] = l.Attrs().Name
		a, err := LinkAddrs(l)
		if err != nil {
			return nil, err
		}
		out = append(append(out, linkLine(l)), a...)
	}
	rs, err := Routes(nil)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		out = append(out, RouteLine(r, names[r.LinkIndex]))
	}
	return out, nil
}

// Routes lists the routes of every table and family, through l only when
// l is not nil.
func Routes(l netlink.Link) ([]netlink.Route, error) {
	filter, mask := &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE
	if l != nil {
		filter.LinkIndex, mask = l.Attrs().Index, mask|netlink.RT_FILTER_OIF
	}
	rs, err := nldump.RouteListFiltered(nil, netlink.FAMILY_ALL, filter, mask)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	return rs, nil
}

// RouteLine is one route as a fact; dev names its netdev.
func RouteLine(r netlink.Route, dev string) string {
	return fmt.Sprintf("route table=%d type=%d proto=%d scope=%d dst=%s src=%s gw=%s dev=%s prio=%d",
		r.Table, r.Type, r.Protocol, r.Scope, ipnet(r.Dst), ip(r.Src), ip(r.Gw), dev, r.Priority)
}

// LinkAddrs is one "addr NAME CIDR" line per address of l.
func LinkAddrs(l netlink.Link) ([]string, error) {
	as, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, fmt.Sprintf("addr %s %s", l.Attrs().Name, a.IPNet))
	}
	return out, nil
}

func ipnet(n *net.IPNet) string {
	if n == nil {
		return "default"
	}
	return n.String()
}

func ip(a net.IP) string {
	if a == nil {
		return "-"
	}
	return a.String()
}

// rdmaDevices describes each RDMA device init_net sees, its netdev and its
// ports.
func rdmaDevices() ([]string, error) {
	sys := rdma.New()
	devs, err := sys.Devices()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range devs {
		out = append(out, fmt.Sprintf("rdma dev %s driver=%s guid=%s netdev=%s pci=%s", d.Name, d.Driver, d.NodeGUID, d.Netdev, d.PCI))
		ports, err := sys.Ports(d.Name)
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			out = append(out, fmt.Sprintf("rdma port %s/%d %s %s", d.Name, p.Port, p.State, p.PhysState))
		}
	}
	if len(out) == 0 {
		out = append(out, "rdma: no device in init_net")
	}
	return out, nil
}

// gids reads each GID without its row. The kernel numbers the rows in the
// order its GID work queue sees the addresses come back, which a restore
// does not fix (on 6.12 the IPv4-mapped and the global IPv6 rows can swap
// after a GC), so the set of GIDs is what must come back.
func gids() ([]string, error) {
	gs, err := rdma.New().GIDs()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("GIDs: %w", err)
	}
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		out = append(out, fmt.Sprintf("gid %s/%d %s %s %s", g.Device, g.Port, g.GID, g.Type, g.Netdev))
	}
	return out, nil
}

// Pnet reads the SMC pnet table of the netns at nsPath ("": this one); a
// kernel without SMC has none.
func Pnet(nsPath string) ([]string, error) {
	if !HasSMC() {
		return []string{"pnet: no SMC"}, nil
	}
	var rows []smc.PnetEntry
	err := smc.Do(nsPath, func(c *smc.Client) (err error) {
		rows, err = c.PnetDump()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pnet table of %q: %w", nsPath, err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, "pnet "+r.String())
	}
	return out, nil
}

// HasSMC reports whether this kernel has SMC (the guest's init loads smc where the
// kernel ships it; docs/kernels.md says which do, and the caps scenario
// holds each kernel to it).
func HasSMC() bool {
	_, err := os.Stat("/sys/module/smc")
	return err == nil
}

// Files lists every entry under dirs with a hash of each regular file.
// Left out: host-local's allocation cursor (last_reserved_ip.N, not a
// lease), the plugin's outcomes.jsonl (its log of verbs, a line per call
// by design) and its cache-* files (what STATUS probed of the kernel).
func Files(dirs ...string) ([]string, error) {
	var out []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return fs.SkipDir
			}
			if err != nil {
				return err
			}
			name := d.Name()
			if strings.HasPrefix(name, "last_reserved_ip.") || name == "outcomes.jsonl" || strings.HasPrefix(name, "cache-") {
				return nil
			}
			if !d.Type().IsRegular() {
				out = append(out, "entry "+path)
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out = append(out, "file "+path+" "+hex.EncodeToString(sum[:6]))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("files under %s: %w", dir, err)
		}
	}
	return out, nil
}

// Diff says what want has that got lacks, and the reverse.
func Diff(want, got []string) string {
	missing := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return slices.Contains(got, s) })
	extra := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return slices.Contains(want, s) })
	return fmt.Sprintf("missing: %q unexpected: %q", missing, extra)
}

// SettleTo polls the node until it equals want: GIDs, link-local
// addresses and the NIC's carrier follow a move back asynchronously.
// Bounded in time, not in readings: one reading takes a while under TCG.
func SettleTo(t testing.TB, want Node, dirs ...string) (Node, bool) {
	t.Helper()
	var got Node
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		got, err = ReadNode(dirs...)
		if err == nil && slices.Equal(got, want) {
			return got, true
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("read the node: %v", err)
			}
			return got, false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Settled waits until nic has its carrier and a link-local address that
// is not tentative, and fails t if it never has.
func Settled(t testing.TB, nic string) {
	t.Helper()
	if err := WaitSettled(nic); err != nil {
		t.Fatal(err)
	}
}

// WaitSettled polls, for 20 s, until nic has its carrier and a link-local
// address that is not tentative, and no tentative address at all.
func WaitSettled(nic string) error {
	return Poll(20*time.Second, 100*time.Millisecond, func() error {
		l, err := netlink.LinkByName(nic)
		if err != nil {
			return err
		}
		if l.Attrs().RawFlags&unix.IFF_LOWER_UP == 0 {
			return errors.New(nic + " has no carrier")
		}
		as, err := nldump.AddrList(nil, l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		ll := false
		for _, a := range as {
			if a.Flags&unix.IFA_F_TENTATIVE != 0 {
				return fmt.Errorf("%s has a tentative address %s", nic, a.IPNet)
			}
			ll = ll || a.IP.IsLinkLocalUnicast()
		}
		if !ll {
			return errors.New(nic + " has no link-local address")
		}
		return nil
	})
}

// NICView is what DEL must restore of netdev name in init_net: name, MTU,
// MAC, flags, addresses, and the routes through it of every table and
// family, sorted.
func NICView(name string) ([]string, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("no netdev %s in init_net: %w", name, err)
	}
	a := l.Attrs()
	out := []string{fmt.Sprintf("link %s mtu=%d mac=%s flags=%#x", a.Name, a.MTU, a.HardwareAddr, a.RawFlags)}
	addrs, err := LinkAddrs(l)
	if err != nil {
		return nil, err
	}
	rs, err := Routes(l)
	if err != nil {
		return nil, err
	}
	out = append(out, addrs...)
	for _, r := range rs {
		out = append(out, RouteLine(r, ""))
	}
	slices.Sort(out)
	return out, nil
}

// WithoutFiles is n without its state and lease files: the kernel's part
// of the node, for a comparison across the first pod, which creates the
// state and lease directories.
func (n Node) WithoutFiles() Node {
	return slices.DeleteFunc(slices.Clone(n), func(s string) bool {
		return strings.HasPrefix(s, "file ") || strings.HasPrefix(s, "entry ")
	})
}

// LeaseGone checks that host-local holds no lease of addr in dir (its
// dataDir) for network rdmanet.
func LeaseGone(dir, addr string) error {
	if addr == "" {
		return errors.New("no address known to look for")
	}
	_, err := os.Stat(filepath.Join(dir, "rdmanet", addr))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("lease %s still in %s", addr, dir)
	}
	return err
}
