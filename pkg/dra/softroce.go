package dra

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// DefaultSoftRoCEPods is the capacity `pods` of a soft-RoCE NIC when the
// driver is given none (--soft-roce-pods): how many pods may share it.
const DefaultSoftRoCEPods = 16

// withoutPodSoftRoCE leaves out of devs the pods' own soft-RoCE devices,
// each into skipped with why: in shared mode the host lists every netns's
// RDMA devices, those a podSoftRoCE network made in its pods too, and a
// claim allocated one would get a device of another pod, made and deleted
// with it. A device is a pod's when an attachment record names it as its
// soft-RoCE device, or when it has rdma.SoftRoCEName's shape and its
// netdev is not in the host netns. Both, since neither is enough alone:
// the driver reads only the records of its --cni-data-dir (another
// network's dataDir holds those of its pods), an unreadable record names
// nothing, and a pod's device is made in its netns only after its record
// names it; while the shape alone would also hide a device of that name
// an admin made on a host netdev.
func (d *Discoverer) withoutPodSoftRoCE(devs []rdma.Device, recs []*state.Record, skipped map[string]string) []rdma.Device {
	owners := map[string]string{}
	for _, r := range recs {
		for _, l := range r.Links {
			if l.SoftRoCE && l.Device != "" {
				owners[l.Device] = r.Pod.Namespace + "/" + r.Pod.Name
			}
		}
	}
	var out []rdma.Device
	for _, dev := range devs {
		if pod, ok := owners[dev.Name]; ok {
			skipped[dev.Name] = "the soft-RoCE device of pod " + pod + " (its attachment record): a pod's own device is never published"
			continue
		}
		if rdma.IsSoftRoCEName(dev.Name) && !d.netdevInHost(dev.Netdev) {
			skipped[dev.Name] = "named as a pod's soft-RoCE device (rxe_ and 12 hex digits) on a netdev outside the host netns: " +
				"a pod's own device is never published"
			continue
		}
		out = append(out, dev)
	}
	return out
}

// addSoftRoCE adds to seen one NIC for each soft-RoCE netdev offer names,
// keyed by its DRA name, unless the plugin would refuse its pods here
// (softRoCERefusal), which goes to skipped. A key an RDMA device has too
// is the DRA name of both: neither is published.
func (d *Discoverer) addSoftRoCE(seen map[string]NIC, mode rdma.Mode, devs []rdma.Device, offer Offer, skipped map[string]string) {
	for _, netdev := range slices.Sorted(maps.Keys(offer.SoftRoCE)) {
		n := d.softRoCEFacts(netdev)
		key := n.DRAName
		if key == "" {
			key = netdev // uniqueNames says why it is not published
		}
		if why := d.softRoCERefusal(netdev, mode, devs); why != "" {
			skipped[key] = "podSoftRoCE on netdev " + netdev + ": " + why
			continue
		}
		if _, taken := seen[key]; taken {
			delete(seen, key)
			skipped[key] = fmt.Sprintf("DRA device name %s is shared by the soft-RoCE NIC %s and an RDMA device", key, netdev)
			continue
		}
		seen[key] = n
	}
}

// softRoCERefusal says why the plugin would refuse a podSoftRoCE pod on
// netdev here, "" when it would serve it: the reasons of its error 112
// (pkg/chain's softRoCEOffer), in its order, and a netdev the host netns
// does not have, on which no child can be made.
func (d *Discoverer) softRoCERefusal(netdev string, mode rdma.Mode, devs []rdma.Device) string {
	if mode != rdma.ModeShared {
		return fmt.Sprintf("the RDMA subsystem is in %s netns mode: an rxe device made inside a pod's netns cannot open its port there", mode)
	}
	if why := d.softRoCEUnsupported(); why != "" {
		return why
	}
	if !d.netdevInHost(netdev) {
		return "no such netdev in the host netns"
	}
	if i := slices.IndexFunc(devs, func(dev rdma.Device) bool { return dev.Netdev == netdev }); i >= 0 {
		return "it has RDMA device " + devs[i].Name + ", whose GIDs for the pods' addresses would take their RoCE traffic from the pods' own rxe devices"
	}
	return ""
}

// softRoCEFacts reads what is published of soft-RoCE NIC netdev: its PCI
// function, its bond members, and its operational state as the state of
// the port its pods' rxe devices get (rdma_rxe's port is active while its
// netdev runs with a carrier).
func (d *Discoverer) softRoCEFacts(netdev string) NIC {
	root := d.sysRoot()
	n := NIC{Device: rdma.Device{Driver: "rdma_rxe", Netdev: netdev, PCI: d.System.NetdevPCI(netdev)},
		DRAName: rdma.SoftRoCEDRAName(netdev), SoftRoCE: true, LinkLayer: "Ethernet", PortState: operPortState(root, netdev),
		SoftRoCEPods: d.SoftRoCEPods, NUMANode: -1}
	if n.SoftRoCEPods <= 0 {
		n.SoftRoCEPods = DefaultSoftRoCEPods
	}
	n.BondMembers = bondMembers(root, netdev)
	n.PCIeRoot, n.NUMANode = pciFacts(root, n.PCI)
	return n
}

// operPortState is netdev's operstate as a port state: ACTIVE when it is
// up, or unknown (a driver that does not report it; the kernel's
// operstates.rst: to be taken as usable), DOWN otherwise; "" when it
// cannot be read (no taint for a state not seen).
func operPortState(sysRoot, netdev string) string {
	switch readTrim(filepath.Join(sysRoot, "class", "net", netdev, "operstate")) {
	case "":
		return ""
	case "up", "unknown":
		return "ACTIVE"
	}
	return "DOWN"
}

// netdevInHost reports whether the host netns (the driver's, whose sysfs
// is mounted) has netdev.
func (d *Discoverer) netdevInHost(netdev string) bool {
	if netdev == "" || strings.Contains(netdev, "/") || netdev == "." || netdev == ".." {
		return false
	}
	_, err := os.Lstat(filepath.Join(d.sysRoot(), "class", "net", netdev))
	return err == nil
}

func (d *Discoverer) softRoCEUnsupported() string {
	if d.SoftRoCEUnsupported == nil {
		return rdma.SoftRoCEUnsupported(rdma.KernelRelease())
	}
	return d.SoftRoCEUnsupported()
}
