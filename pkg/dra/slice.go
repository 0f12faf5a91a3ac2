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
	// CapGIDs is the GID table entries of port 1 in shared mode: each
	// pod's IPv6 address on the NIC takes two (RoCE v1 and v2), so a claim
	// consumes 2 by default, and the scheduler never places more pods on a
	// port than its table holds.
	CapGIDs resourceapi.QualifiedName = "gids"
)

// Devices returns the ResourceSlice devices of node: one per NIC.
func Devices(node *Node) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(node.NICs))
	for _, n := range node.NICs {
		out = append(out, device(n, node.Mode))
	}
	return out
}

func device(n NIC, mode rdma.Mode) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrRDMADevice: str(n.Name),
		AttrNetnsMode:  str(string(mode)),
		AttrBond:       {BoolValue: ptr.To(len(n.BondMembers) > 0)},
		AttrSMCR:       {BoolValue: ptr.To(n.LinkLayer == "Ethernet")},
		AttrInPod:      {BoolValue: ptr.To(n.InPod)},
	}
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
	d := resourceapi.Device{Name: n.DRAName, Attributes: attrs, Taints: taints(n, mode)}
	if mode == rdma.ModeShared && n.GIDTableSize >= rdma.GIDsPerAddress {
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapGIDs: {
				Value: *resource.NewQuantity(int64(n.GIDTableSize), resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    resource.NewQuantity(rdma.GIDsPerAddress, resource.DecimalSI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(rdma.GIDsPerAddress, resource.DecimalSI), Step: resource.NewQuantity(rdma.GIDsPerAddress, resource.DecimalSI)},
				},
			},
		}
	}
	return d
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

// putStr sets a string attribute; the API caps one at 64 bytes, and a
// longer value (a bond's member list) is left out rather than cut.
func putStr(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, k resourceapi.QualifiedName, v string) {
	if v != "" && len(v) <= resourceapi.DeviceAttributeMaxValueLength {
		m[k] = str(v)
	}
}

func sortNICs(n []NIC) { sort.Slice(n, func(i, j int) bool { return n[i].Name < n[j].Name }) }
