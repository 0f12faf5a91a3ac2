package rdma

import "strings"

// maxDRAName is the longest DRA device name: a DNS label.
const maxDRAName = 63

// DRADeviceName is the name under which the DRA driver (pkg/dra) publishes
// the RDMA device called rdmaName in its ResourceSlice, and under which the
// plugin finds it again in kubelet's pod-resources answer without asking
// the API server. It is the device name lower-cased, each character outside
// [a-z0-9] turned into '-', trimmed of '-' at both ends and to 63
// characters (a DNS label, as the API requires of device names): mlx5_0 ->
// mlx5-0, erdma_0 -> erdma-0, rxe0 -> rxe0. It is "" for a name with no
// letter or digit. Two devices of one node with the same DRA name are
// published by neither and claimed by neither (DRANameOwners).
func DRADeviceName(rdmaName string) string {
	b := []byte(strings.ToLower(rdmaName))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if len(s) > maxDRAName {
		s = strings.TrimRight(s[:maxDRAName], "-")
	}
	return s
}

// SoftRoCEDRAName is the name under which the DRA driver publishes the
// soft-RoCE NIC netdev of a podSoftRoCE entry, and under which the plugin
// maps a claim device back to the pod's own rxe device: "softroce-" and
// DRADeviceName(netdev), trimmed to 63 characters (a DNS label): eth1 ->
// softroce-eth1. The prefix keeps it apart from the DRA names of the RDMA
// devices published beside it; an RDMA device whose DRA name is the same
// (one named softroce_eth1) is published by neither, as any two devices
// sharing a DRA name. It is "" for a netdev name with no letter or digit.
func SoftRoCEDRAName(netdev string) string {
	n := DRADeviceName(netdev)
	if n == "" {
		return ""
	}
	return DRADeviceName("softroce-" + n)
}

// DRANameOwners maps each DRA device name of devs to the devices that have
// it; a name with more than one owner names no device.
func DRANameOwners(devs []Device) map[string][]Device {
	out := map[string][]Device{}
	for _, d := range devs {
		if n := DRADeviceName(d.Name); n != "" {
			out[n] = append(out[n], d)
		}
	}
	return out
}
