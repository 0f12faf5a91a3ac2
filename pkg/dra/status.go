package dra

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Values of the Ready condition the driver writes into a claim's
// status.devices (KEP-4817).
const (
	ConditionReady  = "Ready"
	ReasonAttached  = "Attached"  // the plugin's ADD gave the pod its RDMA interface
	ReasonAttaching = "Attaching" // the plugin's ADD is under way, or was cut short and waits for DEL
)

// claimRef names a ResourceClaim.
type claimRef struct{ Namespace, Name string }

func (ref claimRef) String() string { return ref.Namespace + "/" + ref.Name }

// deviceStatus is one entry of a claim's status.devices as the driver
// writes it: the pod's RDMA interface that came from the claim's device.
type deviceStatus struct {
	Pool, Device, ShareID string
	IfName, MAC           string // in the pod; empty for a link without a netdev
	IPs                   []string
	Ready                 bool
	Failed                bool // the plugin's last ADD for the pod failed (no record)
	InvalidConfig         bool // Prepare refused the claim's configuration
	Message               string
	Pod                   string // namespace/name
}

func (d deviceStatus) key() string { return d.Pool + "/" + d.Device + "/" + d.ShareID }

func (d deviceStatus) reason() string {
	switch {
	case d.Ready:
		return ReasonAttached
	case d.InvalidConfig:
		return ReasonInvalidConfig
	case d.Failed:
		return ReasonAttachFailed
	}
	return ReasonAttaching
}

// claimStatuses derives, from the CNI plugin's attachment records, the
// status.devices entries of every claim with a device of this driver in
// pool, sorted by device. A device two records name (a claim shared by
// pods) is reported from the older record.
func claimStatuses(recs []*state.Record, pool string) map[claimRef][]deviceStatus {
	recs = slices.Clone(recs)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].CreatedAt.Before(recs[j].CreatedAt) })
	out := map[claimRef][]deviceStatus{}
	seen := map[string]bool{}
	for _, r := range recs {
		for _, c := range r.Claims {
			if c.Driver != DriverName || c.Pool != pool || c.Name == "" || c.Namespace == "" || c.Device == "" {
				continue
			}
			ref := claimRef{Namespace: c.Namespace, Name: c.Name}
			d, ok := linkStatus(r, c)
			if !ok || seen[ref.String()+"/"+d.key()] {
				continue
			}
			seen[ref.String()+"/"+d.key()] = true
			out[ref] = append(out[ref], d)
		}
	}
	for _, devs := range out {
		sort.Slice(devs, func(i, j int) bool { return devs[i].key() < devs[j].key() })
	}
	return out
}

// linkStatus is the status of the claim device claim from the link of record r
// that holds its RDMA device; false when no link does (ADD selected it
// but has not recorded it yet).
func linkStatus(r *state.Record, claim state.Claim) (deviceStatus, bool) {
	for _, l := range r.Links {
		if l.Device != claim.RDMADevice {
			continue
		}
		d := deviceStatus{Pool: claim.Pool, Device: claim.Device, ShareID: claim.ShareID, Pod: r.Pod.Namespace + "/" + r.Pod.Name}
		if l.Kind != state.LinkNone {
			d.IfName, d.MAC, d.IPs = l.PodName, strings.ToLower(l.MAC), prefixes(l.IPs)
			if len(d.IfName) > resourceapi.NetworkDeviceDataInterfaceNameMaxLength || len(d.MAC) > resourceapi.NetworkDeviceDataHardwareAddressMaxLength {
				d.IfName, d.MAC = "", "" // not what the plugin writes: the file is not trusted
			}
		}
		// Done, and addressed when it takes an IPAM lease: what the pod
		// sees once ADD returns (a failed ADD removes the record).
		d.Ready = l.Step == state.StepDone && (!l.IPAM || len(l.IPs) > 0)
		if d.Ready {
			d.Message = fmt.Sprintf("RDMA device %s is %s of pod %s (%s mode)", l.Device, orNone(d.IfName), d.Pod, r.Mode)
		} else {
			d.Message = fmt.Sprintf("RDMA device %s: attaching to pod %s (step %s)", l.Device, d.Pod, l.Step)
		}
		return d, true
	}
	return deviceStatus{}, false
}

// prefixes returns the addresses in CIDR notation of ips, at most as many
// as the API takes: the record is a file on disk, not trusted to be valid.
func prefixes(ips []string) []string {
	var out []string
	for _, ip := range ips {
		if p, err := netip.ParsePrefix(ip); err == nil && len(out) < resourceapi.NetworkDeviceDataMaxIPs {
			out = append(out, p.String())
		}
	}
	return out
}

func orNone(ifName string) string {
	if ifName == "" {
		return "shared without an interface"
	}
	return ifName
}
