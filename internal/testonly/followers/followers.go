// Package followers restates, for tests, how those who read a chain's final
// result but cannot be linked here derive what they report from it: CRI-O
// and Multus (the Go module proxy refuses CRI-O's, ocicni's and Multus's
// modules and its network-attachment-definition client). Each rule is
// written from the consumer's documented behaviour, named in its comment;
// containerd, whose go-cni the tests can run, is tested with the real thing.
package followers

import (
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// CRIOPodIPs is CRI-O's rule (server/sandbox_network.go): every IP of the
// default network's result is a pod IP, in result order, whatever interface
// it points at; kubelet takes the first as the pod IP and the rest as its
// other pod IPs.
func CRIOPodIPs(r *types100.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		if ip != nil {
			out = append(out, ip.Address.IP.String())
		}
	}
	return out
}

// Status is one entry of Multus's network-status annotation.
type Status struct {
	Interface string
	IPs       []string
	Default   bool
	MTU       int
}

// MultusStatuses is network-attachment-definition-client's
// CreateNetworkStatuses, which Multus runs on each delegate's result:
//   - a result with one interface gives one entry: the last sandbox
//     interface with every IP of the result;
//   - otherwise one entry per sandbox interface, in order; with
//     defaultNetwork the default is the interface of the first IP that has
//     a gateway and an interface index, else the first sandbox interface;
//   - an IP with an index goes to that interface (dropped when it is not a
//     sandbox interface), an IP without one to the last sandbox interface.
func MultusStatuses(r *types100.Result, defaultNetwork bool) []Status {
	if len(r.Interfaces) == 1 {
		s := Status{Default: defaultNetwork}
		for _, iface := range r.Interfaces {
			if iface != nil && iface.Sandbox != "" {
				s.Interface, s.MTU = iface.Name, iface.Mtu
			}
		}
		s.IPs = CRIOPodIPs(r)
		return []Status{s}
	}
	gw := -1
	for _, ip := range r.IPs {
		if ip != nil && ip.Gateway != nil && ip.Interface != nil {
			gw = *ip.Interface
			break
		}
	}
	var out []Status
	at := map[int]int{}
	defaultSet := false
	for i, iface := range r.Interfaces {
		if iface == nil || iface.Sandbox == "" {
			continue
		}
		isDefault := defaultNetwork && !defaultSet && (i == gw || gw == -1)
		defaultSet = defaultSet || isDefault
		at[i] = len(out)
		out = append(out, Status{Interface: iface.Name, MTU: iface.Mtu, Default: isDefault})
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		if ip.Interface == nil {
			if len(out) > 0 {
				out[len(out)-1].IPs = append(out[len(out)-1].IPs, ip.Address.IP.String())
			}
			continue
		}
		if j, ok := at[*ip.Interface]; ok {
			out[j].IPs = append(out[j].IPs, ip.Address.IP.String())
		}
	}
	return out
}
