package dra

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"time"

	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Node is one discovery of the node's RDMA NICs.
type Node struct {
	Mode rdma.Mode
	NICs []NIC // sorted by RDMA device name, then DRA name: soft-RoCE NICs (no RDMA device) first
	// Skipped names devices left out, with why (not offered by the
	// plugin's entries, no DRA name, a DRA name two devices share, a pod's
	// own soft-RoCE device, a soft-RoCE NIC the plugin would refuse); a
	// soft-RoCE NIC by its DRA name.
	Skipped map[string]string
}

// Discoverer reads the node's RDMA NICs.
type Discoverer struct {
	System  *rdma.System
	SysRoot string // "" means /sys
	// Records lists the CNI plugin's attachment records: a device an
	// exclusive-mode pod holds is gone from the host's view and stays
	// published from what was last seen of it, or from its record.
	Records func() ([]*state.Record, error)
	// Offer reads which devices the plugin may attach; nil offers all.
	Offer func() Offer
	// Uplinks maps, in exclusive mode, the host netdevs that carry the
	// node's own traffic to what they carry (netdev.NodeUplinks); nil
	// publishes them.
	Uplinks func(nodeAddrs []netip.Addr) (map[string]string, error)
	// SoftRoCEUnsupported says why this kernel cannot give a pod an rxe
	// device of its own, "" when it can: the plugin's check (its error
	// 112). nil: rdma.SoftRoCEUnsupported of the running kernel.
	SoftRoCEUnsupported func() string
	// SoftRoCEPods is the capacity `pods` of each soft-RoCE NIC: how many
	// pods may share it; 0 is DefaultSoftRoCEPods.
	SoftRoCEPods int
	// OfferGrace is how long the last offer with an rdma-chain entry
	// stands in for reads without any (Discoverer.offer); 0 keeps none.
	OfferGrace time.Duration
	Now        func() time.Time // nil: time.Now
	Log        *slog.Logger     // nil: not logged

	last        map[string]NIC
	lastOffer   Offer      // the last offer read with an entry
	offerLostAt *time.Time // when the entries went, while they are gone
}

func (d *Discoverer) sysRoot() string {
	if d.SysRoot == "" {
		return "/sys"
	}
	return d.SysRoot
}

// Discover reads the RDMA netns mode and every RDMA device of the host
// netns, with the facts the driver publishes, and the soft-RoCE NICs of
// the podSoftRoCE entries.
func (d *Discoverer) Discover() (*Node, error) {
	mode, err := d.System.NetnsMode()
	if err != nil {
		return nil, fmt.Errorf("read the RDMA netns mode: %w", err)
	}
	devs, err := d.System.Devices()
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	node := &Node{Mode: mode, Skipped: map[string]string{}}
	recs := d.records()
	seen := map[string]NIC{}
	for _, dev := range d.withoutPodSoftRoCE(devs, recs, node.Skipped) {
		n := d.facts(dev)
		seen[n.Name] = n
	}
	offer := d.offer()
	if mode == rdma.ModeExclusive {
		d.addHeld(seen, recs)
		if d.Uplinks != nil {
			uplinks, err := d.Uplinks(offer.NodeAddrs)
			if err != nil {
				return nil, fmt.Errorf("read which netdevs carry the node's traffic: %w", err)
			}
			withoutUplinks(seen, uplinks, node.Skipped)
		}
	}
	if d.Offer != nil {
		withoutUnoffered(seen, offer, node.Skipped)
	}
	d.last = maps.Clone(seen)
	d.addSoftRoCE(seen, mode, devs, offer, node.Skipped)
	node.NICs = uniqueNames(seen, node.Skipped)
	return node, nil
}

// records returns the plugin's readable attachment records; unreadable
// ones are the plugin's to quarantine.
func (d *Discoverer) records() []*state.Record {
	if d.Records == nil {
		return nil
	}
	recs, _ := d.Records()
	return recs
}

// facts reads what is published of dev.
func (d *Discoverer) facts(dev rdma.Device) NIC {
	root := d.sysRoot()
	n := NIC{Device: dev, DRAName: rdma.DRADeviceName(dev.Name), NUMANode: -1}
	n.LinkLayer, n.PortState, n.GIDTableSize = portFacts(root, dev.Name)
	if free, size, err := d.System.FreeGIDs(dev.Name, 1, rdma.GIDsPerAddress); err == nil && size > 0 {
		n.GIDTableFull = free < rdma.GIDsPerAddress
	}
	n.BondMembers = bondMembers(root, dev.Netdev)
	n.PCIeRoot, n.NUMANode = pciFacts(root, dev.PCI)
	return n
}

// pciFacts reads the PCIe root complex and NUMA node of PCI function pci
// under sysRoot: "" and -1 for what it does not have.
func pciFacts(sysRoot, pci string) (pcieRoot string, numaNode int) {
	numaNode = -1
	if pci == "" {
		return "", numaNode
	}
	if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(pci, deviceattribute.WithFSFromRoot(sysRoot)); err == nil && a.Value.StringValue != nil {
		pcieRoot = *a.Value.StringValue
	}
	if a, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(pci, deviceattribute.ScalarAttribute, deviceattribute.WithFSFromRoot(sysRoot)); err == nil && a.Value.IntValue != nil {
		numaNode = int(*a.Value.IntValue)
	}
	return pcieRoot, numaNode
}

// addHeld adds the devices exclusive-mode pods hold (recs, the plugin's
// records): from the last discovery when it saw them, else from the
// record.
func (d *Discoverer) addHeld(seen map[string]NIC, recs []*state.Record) {
	for _, r := range recs {
		if r.Mode != rdma.ModeExclusive {
			continue
		}
		for _, l := range r.Links {
			if !l.RDMAMoved || l.Device == "" {
				continue
			}
			if _, ok := seen[l.Device]; ok {
				continue
			}
			n, ok := d.last[l.Device]
			if !ok {
				n = NIC{Device: rdma.Device{Name: l.Device, Netdev: l.HostName}, DRAName: rdma.DRADeviceName(l.Device), NUMANode: -1}
			}
			n.InPod = true
			seen[l.Device] = n
		}
	}
}

// uniqueNames returns the NICs whose DRA name no other NIC has, sorted;
// the others go to skipped with why.
func uniqueNames(seen map[string]NIC, skipped map[string]string) []NIC {
	byName := map[string][]string{}
	for name, n := range seen {
		byName[n.DRAName] = append(byName[n.DRAName], name)
	}
	var out []NIC
	for name, n := range seen {
		switch owners := byName[n.DRAName]; {
		case n.DRAName == "":
			skipped[name] = "its name has no letter or digit: no DRA device name"
		case len(owners) > 1:
			skipped[name] = fmt.Sprintf("DRA device name %s is shared by %d devices", n.DRAName, len(owners))
		default:
			out = append(out, n)
		}
	}
	sortNICs(out)
	return out
}
