package inspect

import (
	"net"
	"slices"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// NetnsReport is one netns as inspect --netns sees it.
type NetnsReport struct {
	Path       string              `json:"path"`
	Interfaces []Iface             `json:"interfaces"`
	Pnet       []PnetRow           `json:"pnet"`
	SMCSysctls map[string]string   `json:"smcSysctls,omitempty"`
	Fallbacks  *smc.FallbackReport `json:"smcFallbacks,omitempty"`
}

func (in *inspector) readNetns(path string) {
	nr := &NetnsReport{Path: path, Interfaces: []Iface{}, Pnet: []PnetRow{}}
	in.r.Netns = nr
	ifaces, err := in.k.Interfaces(path)
	if err != nil {
		in.unreadable("interfaces of netns "+path, err)
		return
	}
	// Shared mode: every device and its GIDs are visible here. Exclusive
	// mode: a moved device only from inside its netns.
	gids, gerr := in.k.GIDs()
	if in.r.RDMA.Mode == rdma.ModeExclusive {
		gids, gerr = in.k.GIDsIn(path)
	}
	if gerr != nil {
		in.unreadable("GID tables seen from "+path, gerr)
	}
	recorded := in.recordedIfaces(path)
	for _, i := range ifaces {
		if i.Name == "lo" {
			continue
		}
		i.GIDs = podGIDs(i, gids)
		i.RDMA = recorded[i.Name] || len(i.GIDs) > 0
		nr.Interfaces = append(nr.Interfaces, i)
	}
	in.readNetnsSMC(path, nr)
}

func (in *inspector) readNetnsSMC(path string, nr *NetnsReport) {
	if !in.r.SMC.Available {
		return // said once for the node
	}
	list, err := in.k.Pnet(path)
	if err != nil {
		in.unreadable("pnet table of "+path, err)
	}
	nr.Pnet = pnetRows(list)
	if fb, err := in.k.Fallbacks(path); err != nil {
		in.unreadable("SMC fallback statistics of "+path, err)
	} else {
		nr.Fallbacks = &fb
	}
	if nr.SMCSysctls, err = in.k.SMCSysctls(path); err != nil {
		in.unreadable("net.smc sysctls of "+path, err)
	}
}

// recordedIfaces are the pod-side RDMA interfaces records place in path.
func (in *inspector) recordedIfaces(path string) map[string]bool {
	out := map[string]bool{}
	for _, a := range in.r.Attachments {
		if a.NetNS != path {
			continue
		}
		for _, l := range a.Links {
			if l.PodName != "" {
				out[l.PodName] = true
			}
		}
	}
	return out
}

// podGIDs are the GID rows that belong to interface i: their netdev has
// its name and their GID is one of its addresses. Names repeat across pods
// (every pod has an rdma0), addresses do not.
func podGIDs(i Iface, gids []rdma.GID) []rdma.GID {
	var out []rdma.GID
	for _, g := range gids {
		if g.Netdev != i.Name {
			continue
		}
		gip := gidIP(g.GID)
		if gip != nil && slices.ContainsFunc(i.Addrs, func(a string) bool {
			ip, _, err := net.ParseCIDR(a)
			return err == nil && ip.Equal(gip)
		}) {
			out = append(out, g)
		}
	}
	return out
}

// gidIP parses a sysfs GID ("fe80:0000:...") as an IP (IPv4-mapped GIDs
// come out as IPv4).
func gidIP(g string) net.IP {
	h := strings.ReplaceAll(g, ":", "")
	if len(h) != 32 {
		return nil
	}
	var parts []string
	for i := 0; i < 32; i += 4 {
		parts = append(parts, h[i:i+4])
	}
	return net.ParseIP(strings.Join(parts, ":"))
}
