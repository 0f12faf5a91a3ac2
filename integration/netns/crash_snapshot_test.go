package netns

import (
	"errors"
	"fmt"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nodeSnapshot is everything of the node a verb may change: the links of the
// node netns (names, kinds, MTUs, MACs, aliases, up state, addresses, the
// routes through them in every table), the links of the pod netns, the IPAM
// leases, the plugin's records, quarantine and temp files, and the fake RDMA
// subsystem's moved devices and pnet tables.
type nodeSnapshot struct {
	Node  []string
	Pod   []string
	Files []string
}

func (n *crashNode) snapshot(p *crashPod) nodeSnapshot {
	n.t.Helper()
	var s nodeSnapshot
	var err error
	if err = n.node.Do(func(ns.NetNS) (err error) { s.Node, err = linkState(true); return err }); err != nil {
		n.t.Fatalf("node links: %v", err)
	}
	if err = p.ns.Do(func(ns.NetNS) (err error) { s.Pod, err = linkState(false); return err }); err != nil {
		n.t.Fatalf("pod links: %v", err)
	}
	for _, root := range []string{n.dataDir, n.ipamDir, filepath.Join(n.fakeDir, "moved"), filepath.Join(n.fakeDir, "pnet"),
		filepath.Join(n.dir, "devinfo")} {
		files, err := fileState(root)
		if err != nil {
			n.t.Fatalf("files under %s: %v", root, err)
		}
		s.Files = append(s.Files, files...)
	}
	return s
}

// linkState lists the calling thread's netns links; full adds addresses and
// routes.
func linkState(full bool) ([]string, error) {
	links, err := nldump.LinkList(nil)
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		out = append(out, fmt.Sprintf("link %s %s mtu %d mac %s alias %q up %v", a.Name, l.Type(), a.MTU,
			a.HardwareAddr, a.Alias, a.Flags&net.FlagUp != 0))
		if !full {
			continue
		}
		addrs, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, err
		}
		for _, ad := range addrs {
			if ad.Scope == int(netlink.SCOPE_UNIVERSE) {
				out = append(out, fmt.Sprintf("addr %s %s", a.Name, ad.IPNet))
			}
		}
	}
	if full {
		routes, err := nldump.RouteListFiltered(nil, netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			if r.Protocol != unix.RTPROT_KERNEL && r.Table != unix.RT_TABLE_LOCAL {
				out = append(out, fmt.Sprintf("route %s via %s dev %s table %d metric %d", r.Dst, r.Gw, names[r.LinkIndex], r.Table, r.Priority))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// fileState lists every entry under root with the content of regular files,
// except host-local's allocation cursor (last_reserved_ip.N), which is not a
// lease and moves on with every ADD, and the plugin's outcome log, which
// grows with every call by design (inspect reads it).
func fileState(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return nil
		}
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), "last_reserved_ip.") || d.Name() == outcome.FileName {
			return nil // a cursor, and the plugin's log of its own outcomes
		}
		line := fmt.Sprintf("%s %v", p, d.Type())
		if d.Type().IsRegular() && d.Name() != "lock" {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", b)
		}
		out = append(out, line)
		return nil
	})
	sort.Strings(out)
	return out, err
}

// diff describes how b differs from a, "" when equal.
func (a nodeSnapshot) diff(b nodeSnapshot) string {
	var sb strings.Builder
	for _, part := range []struct {
		name string
		x, y []string
	}{{"node", a.Node, b.Node}, {"pod", a.Pod, b.Pod}, {"files", a.Files, b.Files}} {
		gone, added := setDiff(part.x, part.y), setDiff(part.y, part.x)
		for _, g := range gone {
			fmt.Fprintf(&sb, "  %s lost:  %s\n", part.name, g)
		}
		for _, ad := range added {
			fmt.Fprintf(&sb, "  %s added: %s\n", part.name, ad)
		}
	}
	return sb.String()
}

func setDiff(x, y []string) []string {
	in := map[string]int{}
	for _, s := range y {
		in[s]++
	}
	var out []string
	for _, s := range x {
		if in[s] > 0 {
			in[s]--
			continue
		}
		out = append(out, s)
	}
	return out
}
