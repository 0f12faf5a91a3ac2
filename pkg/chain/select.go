package chain

import (
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// request is what a pod asked for: device IDs from the runtime or kubelet,
// or none (every pod on the network gets RDMA).
type request struct {
	source string
	ids    []string
}

type selectInput struct {
	mode       rdma.Mode
	offered    []rdma.Device
	busy       map[string]string // exclusive: device -> container holding it
	macs       []net.HardwareAddr
	needNetdev bool              // shared mode with a child link: only devices with a netdev serve
	uplinks    map[string]string // exclusive: host netdevs carrying the node's traffic -> what
}

// synthetic reports whether a device-plugin ID names no device: Terway's
// eni-N or the shared plugin's numbers (^(eni-)?[0-9]+$; no regexp, whose
// package-init compile every plugin start would pay).
func synthetic(id string) bool {
	digits := strings.TrimPrefix(id, "eni-")
	return digits != "" && strings.Trim(digits, "0123456789") == ""
}

// selectDevices picks the pod's devices: explicit IDs first (runtime
// deviceID or kubelet's), then the eRDMA MAC rule, then the offered devices.
// In exclusive mode a device held by another pod is never picked.
func selectDevices(req *request, in selectInput) ([]rdma.Device, error) {
	if len(in.offered) == 0 {
		if holders := heldBy(in.busy); holders != "" {
			return nil, cniErrorf(types.ErrTryAgainLater, "every RDMA device offered on this node is attached to another pod (%s); try again when one is released", holders)
		}
		return nil, cniErrorf(CodeNoDevice, "no RDMA device offered on this node (check the devices field)")
	}
	var picked []rdma.Device
	anyDevice := len(req.ids) == 0
	for _, id := range req.ids {
		d, ok, err := mapID(id, in.offered)
		if err != nil {
			// In exclusive mode a held device is invisible from the host.
			name, _, _ := strings.Cut(id, "/")
			if holder, held := in.busy[name]; held {
				return nil, cniErrorf(types.ErrTryAgainLater, "RDMA device %s is attached to container %s (exclusive mode); try again when it is released", name, holder)
			}
			return nil, err
		}
		if !ok {
			anyDevice = true
			continue
		}
		picked = appendUnique(picked, d)
	}
	if anyDevice && len(picked) == 0 {
		var err error
		if picked, err = pickAny(in); err != nil {
			return nil, err
		}
	}
	return checkFree(picked, in)
}

// mapID maps one device ID to an offered device; ok=false means the ID is
// synthetic and any offered device serves it.
func mapID(id string, offered []rdma.Device) (rdma.Device, bool, error) {
	if !config.ValidDeviceID(id) {
		return rdma.Device{}, false, cniErrorf(CodeNoDevice, "device ID %q is malformed", truncate(id))
	}
	if len(id) <= 10 && synthetic(id) {
		return rdma.Device{}, false, nil
	}
	name, _, _ := strings.Cut(id, "/") // erdma_0/17 -> erdma_0
	for _, d := range offered {
		if d.Name == name || (d.PCI != "" && d.PCI == id) {
			return d, true, nil
		}
	}
	return rdma.Device{}, false, cniErrorf(CodeNoDevice, "device ID %q matches no RDMA device offered on this node", id)
}

// pickAny serves a request that names no device: the device whose eRDMA GUID
// matches the pod's primary MAC, else every offered device in shared mode or
// the first free one in exclusive mode (pickFree).
func pickAny(in selectInput) ([]rdma.Device, error) {
	for _, mac := range in.macs {
		guid, err := rdma.GUIDFromMAC(mac)
		if err != nil {
			continue
		}
		for _, d := range in.offered {
			if strings.EqualFold(d.NodeGUID, guid) {
				return []rdma.Device{d}, nil
			}
		}
	}
	if in.mode != rdma.ModeExclusive {
		var out []rdma.Device
		for _, d := range in.offered {
			if d.Netdev != "" || !in.needNetdev {
				out = append(out, d)
			}
		}
		return out, nil
	}
	return pickFree(in)
}

// pickFree is exclusive mode's pick for a pod that names no device: the
// first device no other pod holds whose netdev carries none of the node's
// traffic. When only the node's uplinks are free, a pod holding another
// device may give it back: try again (11); with none held, the uplink is
// returned for checkUplinks to refuse (110). All held: checkFree says so.
func pickFree(in selectInput) ([]rdma.Device, error) {
	var uplink []rdma.Device
	for _, d := range in.offered {
		if _, held := in.busy[d.Name]; held {
			continue
		}
		if in.uplinks[d.Netdev] == "" {
			return []rdma.Device{d}, nil
		}
		if uplink == nil {
			uplink = []rdma.Device{d}
		}
	}
	switch holders := heldBy(in.busy); {
	case uplink != nil && holders != "":
		d := uplink[0]
		return nil, cniErrorf(types.ErrTryAgainLater, "every RDMA device offered on this node that exclusive mode may move is attached to another pod (%s); "+
			"try again when one is released (netdev %s of %s carries %s)", holders, d.Netdev, d.Name, in.uplinks[d.Netdev])
	case uplink != nil:
		return uplink, nil // only the node's uplinks: checkUplinks refuses
	}
	return in.offered[:1], nil // all held: checkFree reports it
}

func checkFree(picked []rdma.Device, in selectInput) ([]rdma.Device, error) {
	if in.mode != rdma.ModeExclusive {
		return picked, nil
	}
	for _, d := range picked {
		if holder, held := in.busy[d.Name]; held {
			return nil, cniErrorf(types.ErrTryAgainLater, "RDMA device %s is attached to container %s (exclusive mode); try again when it is released", d.Name, holder)
		}
	}
	return picked, nil
}

// offeredDevices filters the node's devices by the conf's devices list
// (RDMA device names or netdev names); an empty list offers all.
func offeredDevices(all []rdma.Device, names []string) []rdma.Device {
	if len(names) == 0 {
		return all
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []rdma.Device
	for _, d := range all {
		if want[d.Name] || (d.Netdev != "" && want[d.Netdev]) {
			out = append(out, d)
		}
	}
	return out
}

// heldBy lists the holders of busy devices, "" when none.
func heldBy(busy map[string]string) string {
	var out []string
	for dev, holder := range busy {
		out = append(out, dev+" by "+holder)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// busyDevices maps devices held by exclusive-mode attachments to their
// holder, restricted to the conf's devices list (names or netdev names) when
// it has one. A link whose host side is given back holds nothing.
func busyDevices(recs []*state.Record, devices []string) map[string]string {
	busy := map[string]string{}
	for _, r := range recs {
		if r.Mode != rdma.ModeExclusive {
			continue
		}
		for _, l := range r.Links {
			if l.Step == state.StepReleased {
				continue
			}
			if len(devices) == 0 || slices.Contains(devices, l.Device) || slices.Contains(devices, l.HostName) {
				busy[l.Device] = r.ContainerID
			}
		}
	}
	return busy
}

// resultMACs returns the MACs of the pod-side interfaces of prevResult.
func resultMACs(r *types100.Result) []net.HardwareAddr {
	var out []net.HardwareAddr
	for _, i := range r.Interfaces {
		if i == nil || i.Sandbox == "" {
			continue
		}
		if mac, err := net.ParseMAC(i.Mac); err == nil {
			out = append(out, mac)
		}
	}
	return out
}

func appendUnique(list []rdma.Device, d rdma.Device) []rdma.Device {
	for _, x := range list {
		if x.Name == d.Name {
			return list
		}
	}
	return append(list, d)
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
