package dra

import (
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// DriverName is the driver's name in the API, and the CDI vendor.
const DriverName = config.DefaultDRADriver

// Attribute and capacity names, in the driver's domain.
const (
	AttrRDMADevice   resourceapi.QualifiedName = "rdmaDevice"
	AttrNetdev       resourceapi.QualifiedName = "netdev"
	AttrKernelDriver resourceapi.QualifiedName = "kernelDriver"
	AttrLinkLayer    resourceapi.QualifiedName = "linkLayer"
	AttrPortState    resourceapi.QualifiedName = "portState"
	AttrNetnsMode    resourceapi.QualifiedName = "netnsMode"
	AttrBond         resourceapi.QualifiedName = "bond"
	AttrBondMembers  resourceapi.QualifiedName = "bondMembers"
	AttrSMCR         resourceapi.QualifiedName = "smcr"
	AttrGIDTableSize resourceapi.QualifiedName = "gidTableSize"
	AttrInPod        resourceapi.QualifiedName = "inPod"
	// AttrSoftRoCE is true on the soft-RoCE NIC of a podSoftRoCE entry and
	// false on every other device, so that a claim selects on it.
	AttrSoftRoCE resourceapi.QualifiedName = "podSoftRoCE"
	// CapGIDs is the GID table entries of port 1 in shared mode: each
	// pod's IPv6 address on the NIC takes two (RoCE v1 and v2), so a claim
	// consumes 2 by default, and the scheduler never places more pods on a
	// port than its table holds.
	CapGIDs resourceapi.QualifiedName = "gids"
	// CapPods is how many pods may share a soft-RoCE NIC at once
	// (--soft-roce-pods): each claim takes 1 unless it asks for more. Every
	// byte of soft-RoCE costs the node's CPU.
	CapPods resourceapi.QualifiedName = "pods"
)

// Devices returns the ResourceSlice devices of node: one per NIC.
func Devices(node *Node) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(node.NICs))
	for _, n := range node.NICs {
		out = append(out, device(n, node.Mode))
	}
	return out
}

// device is the slice's device of n: shared by many claims where it has
// a capacity to share (a soft-RoCE NIC's pods, a shared-mode port's GIDs).
func device(n NIC, mode rdma.Mode) resourceapi.Device {
	d := resourceapi.Device{Name: n.DRAName, Attributes: attributes(n, mode), Taints: taints(n, mode)}
	switch {
	case n.SoftRoCE:
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapPods: consumable(int64(n.SoftRoCEPods), 1)}
	case mode == rdma.ModeShared && n.GIDTableSize >= rdma.GIDsPerAddress:
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapGIDs: consumable(int64(n.GIDTableSize), rdma.GIDsPerAddress),
		}
	}
	return d
}

// attributes are n's attributes. The bools are on every device, so that
// CEL reads them unguarded; a fact n does not have is left out. The
// soft-RoCE NIC is no SMC-R device: its pods' rxe devices are made at
// their ADD, and SMC-R over soft-RoCE falls back to TCP (docs/design.md).
func attributes(n NIC, mode rdma.Mode) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrNetnsMode: str(string(mode)),
		AttrBond:      {BoolValue: ptr.To(len(n.BondMembers) > 0)},
		AttrSMCR:      {BoolValue: ptr.To(n.LinkLayer == "Ethernet" && !n.SoftRoCE)},
		AttrInPod:     {BoolValue: ptr.To(n.InPod)},
		AttrSoftRoCE:  {BoolValue: ptr.To(n.SoftRoCE)},
	}
	putStr(attrs, AttrRDMADevice, n.Name)
	putStr(attrs, AttrNetdev, n.Netdev)
	putStr(attrs, AttrKernelDriver, n.Driver)
	putStr(attrs, AttrLinkLayer, n.LinkLayer)
	putStr(attrs, AttrPortState, n.PortState)
	putStr(attrs, AttrBondMembers, strings.Join(n.BondMembers, ","))
	if n.GIDTableSize > 0 {
		attrs[AttrGIDTableSize] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n.GIDTableSize))}
	}
	putStr(attrs, deviceattribute.StandardDeviceAttributePCIBusID, n.PCI)
	putStr(attrs, deviceattribute.StandardDeviceAttributePCIeRoot, n.PCIeRoot)
	if n.NUMANode >= 0 {
		attrs[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n.NUMANode))}
	}
	return attrs
}

// consumable is a capacity of value of which a claim takes step unless it
// asks for more, in steps of step.
func consumable(value, step int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{
		Value: *resource.NewQuantity(value, resource.DecimalSI),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    resource.NewQuantity(step, resource.DecimalSI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(step, resource.DecimalSI), Step: resource.NewQuantity(step, resource.DecimalSI)},
		},
	}
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

// putStr sets a string attribute; the API caps one at 64 bytes, and a
// longer value (a bond's member list) is left out rather than cut.
func putStr(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, k resourceapi.QualifiedName, v string) {
	if v != "" && len(v) <= resourceapi.DeviceAttributeMaxValueLength {
		m[k] = str(v)
	}
}

// sortNICs sorts by RDMA device name, then DRA name (soft-RoCE NICs have
// no RDMA device name), so that a slice of the same NICs is the same.
func sortNICs(n []NIC) {
	sort.Slice(n, func(i, j int) bool {
		if n[i].Name != n[j].Name {
			return n[i].Name < n[j].Name
		}
		return n[i].DRAName < n[j].DRAName
	})
}
