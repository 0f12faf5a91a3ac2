package chain

import (
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// mergeLinks adds the pod-side RDMA interfaces to the chain's result, after
// the primary's entries: name, MAC and sandbox, and from cniVersion 1.1.0
// on their MTU and the RDMA device's PCI address. Their addresses and
// routes are listed only with reportIPs (see addr.ReportIPs); they are in
// the record and in inspect either way.
func mergeLinks(c *call, rec *state.Record, result *types100.Result, out linkOutputs) {
	claimed := false
	for _, l := range rec.Links {
		if l.PodName == "" {
			continue
		}
		if !claimed {
			addr.ClaimIndexless(result, c.args.IfName, c.args.Netns)
			claimed = true
		}
		iface := &types100.Interface{Name: l.PodName, Mac: l.MAC, Sandbox: c.args.Netns}
		if resultHasV11Fields(c.conf.CNIVersion) {
			iface.Mtu = out.mtu(l)
			iface.PciID = devicePCI(out.devs, l.Device)
		}
		result.Interfaces = append(result.Interfaces, iface)
		if res := out.leases[l.PodName]; res != nil && c.conf.ReportIPs {
			addr.ReportIPs(result, res, len(result.Interfaces)-1)
		}
	}
}

// resultHasV11Fields reports whether cniVersion has an interface's mtu and
// pciID, which exist from 1.1.0 on; the CNI library prints them at 1.0.0
// too, so they are left out there.
func resultHasV11Fields(cniVersion string) bool { return cniVersion == "1.1.0" }

// linkOutputs is what ADD's phases produced for the result beside the
// record: the devices given, the children's MTUs and the IPAM results, both
// by pod-side name.
type linkOutputs struct {
	devs     []rdma.Device
	childMTU map[string]int
	leases   map[string]*types100.Result
}

// mtu is the pod interface's MTU: a moved netdev keeps the one recorded
// before the move, a child has the one the kernel gave it.
func (o linkOutputs) mtu(l state.Link) int {
	if l.Kind == state.LinkMoved {
		return l.MTU
	}
	return o.childMTU[l.PodName]
}

func devicePCI(devs []rdma.Device, name string) string {
	for _, d := range devs {
		if d.Name == name {
			return d.PCI
		}
	}
	return ""
}
