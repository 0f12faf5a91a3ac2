package dra

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CharDevices returns the /dev/infiniband character devices of RDMA
// device name, and of no other device: its uverbs device, each umad with
// its issm (the MAD pair a subnet manager or an MPI stack opens together),
// and rdma_cm, which every process of the node shares. They are found by
// each class device's ibdev file under sysRoot.
func CharDevices(sysRoot, name string) []string {
	var out []string
	out = append(out, classDevices(sysRoot, "infiniband_verbs", "uverbs", name)...)
	out = append(out, classDevices(sysRoot, "infiniband_mad", "umad", name)...)
	out = append(out, classDevices(sysRoot, "infiniband_mad", "issm", name)...)
	return append(out, rdmaCM(sysRoot)...)
}

// rdmaCM returns /dev/infiniband/rdma_cm when the node has it (rdma_ucm
// loaded): the RDMA connection manager every process of the node shares.
func rdmaCM(sysRoot string) []string {
	if _, err := os.Lstat(filepath.Join(sysRoot, "class", "misc", "rdma_cm")); err != nil {
		return nil
	}
	return []string{"/dev/infiniband/rdma_cm"}
}

// classDevices lists /dev/infiniband/PREFIXn for the class devices of
// class named PREFIXn whose ibdev is name.
func classDevices(sysRoot, class, prefix, name string) []string {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "class", class))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, prefix) || strings.Trim(n[len(prefix):], "0123456789") != "" || len(n) == len(prefix) {
			continue
		}
		if readTrim(filepath.Join(sysRoot, "class", class, n, "ibdev")) == name {
			out = append(out, "/dev/infiniband/"+n)
		}
	}
	sort.Strings(out)
	return out
}
