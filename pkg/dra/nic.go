package dra

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// NIC is what the driver publishes of one RDMA device.
type NIC struct {
	rdma.Device
	DRAName      string   // rdma.DRADeviceName(Name)
	LinkLayer    string   // port 1: "Ethernet" (RoCE) or "InfiniBand"
	PortState    string   // port 1: "ACTIVE", "DOWN", ...
	GIDTableSize int      // port 1's GID table entries
	GIDTableFull bool     // port 1's GID table was read and has no room for a pod's address
	BondMembers  []string // the netdev is a bond: its slaves
	PCIeRoot     string   // "pci0000:00", "" without a PCI function
	NUMANode     int      // -1: none
	InPod        bool     // exclusive mode: moved into a pod, facts from when it was seen
	// SoftRoCE says it is the soft-RoCE NIC Netdev of a podSoftRoCE entry,
	// not an RDMA device (Name is ""): each pod allocated it gets an rxe
	// device of its own on a child of Netdev at its CNI ADD.
	SoftRoCE     bool
	SoftRoCEPods int // its capacity: how many pods may share it
}

// portFacts reads port 1's link layer, state and GID table size of device
// name from sysfs.
func portFacts(sysRoot, name string) (linkLayer, state string, gids int) {
	port := filepath.Join(sysRoot, "class", "infiniband", name, "ports", "1")
	linkLayer = readTrim(filepath.Join(port, "link_layer"))
	// "4: ACTIVE"
	if _, s, ok := strings.Cut(readTrim(filepath.Join(port, "state")), ": "); ok {
		state = s
	}
	if entries, err := os.ReadDir(filepath.Join(port, "gids")); err == nil {
		gids = len(entries)
	}
	return linkLayer, state, gids
}

// bondMembers returns the slaves of netdev when it is a bond.
func bondMembers(sysRoot, netdev string) []string {
	if netdev == "" {
		return nil
	}
	s := readTrim(filepath.Join(sysRoot, "class", "net", netdev, "bonding", "slaves"))
	if s == "" {
		return nil
	}
	m := strings.Fields(s)
	sort.Strings(m)
	return m
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
