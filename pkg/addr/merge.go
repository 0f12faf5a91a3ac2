package addr

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// The chain's result is read by the plugins after rdma-chain and by the
// runtime (docs/chaining.md says who reads what). By default it gains only
// the pod-side RDMA interface entries: CRI-O reports every IP of the result
// as a pod IP, and the reference primaries' CHECK wants every IP on their
// own interface, so the RDMA interfaces' addresses stay out of it.

// ClaimIndexless points every IP of dst without an interface index at the
// primary's pod interface (the sandbox entry called ifName), adding that
// entry when the primary reported none. An IP without an index belongs to
// the primary's interface (containerd attaches it there); once an RDMA
// interface follows in the list, Multus would give it to the last sandbox
// interface instead. It returns the primary entry's index.
func ClaimIndexless(dst *types100.Result, ifName, sandbox string) int {
	at := -1
	for i, iface := range dst.Interfaces {
		if iface != nil && iface.Name == ifName && iface.Sandbox != "" {
			at = i
			break
		}
	}
	if at < 0 && (hasIndexless(dst.IPs) || !hasSandbox(dst.Interfaces)) {
		dst.Interfaces = append(dst.Interfaces, &types100.Interface{Name: ifName, Sandbox: sandbox})
		at = len(dst.Interfaces) - 1
	}
	for _, ip := range dst.IPs {
		if ip != nil && ip.Interface == nil && at >= 0 {
			ip.Interface = types100.Int(at)
		}
	}
	return at
}

func hasIndexless(ips []*types100.IPConfig) bool {
	for _, ip := range ips {
		if ip != nil && ip.Interface == nil {
			return true
		}
	}
	return false
}

func hasSandbox(ifs []*types100.Interface) bool {
	for _, iface := range ifs {
		if iface != nil && iface.Sandbox != "" {
			return true
		}
	}
	return false
}

// ReportIPs appends copies of res's IPs to dst, each pointing at dst's
// interface ifIndex and without a gateway, and res's routes except default
// routes: an RDMA interface must never look like the pod's default network
// (Multus makes the first interface with a gateway the default). DNS and
// interfaces are left untouched; nil dst or res is a no-op.
func ReportIPs(dst *types100.Result, res *types100.Result, ifIndex int) {
	if dst == nil || res == nil {
		return
	}
	for _, ipc := range res.IPs {
		if ipc == nil {
			continue
		}
		c := ipc.Copy()
		c.Interface = types100.Int(ifIndex)
		c.Gateway = nil
		dst.IPs = append(dst.IPs, c)
	}
	for _, r := range res.Routes {
		if r != nil && !IsDefaultRoute(r) {
			dst.Routes = append(dst.Routes, r.Copy())
		}
	}
}

// IsDefaultRoute reports whether r's destination is 0.0.0.0/0 or ::/0.
func IsDefaultRoute(r *types.Route) bool {
	ones, _ := r.Dst.Mask.Size()
	return ones == 0 && (r.Dst.IP == nil || r.Dst.IP.IsUnspecified() || r.Dst.IP.Equal(net.IPv4zero))
}
