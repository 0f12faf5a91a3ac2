package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// attachment describes rec and checks, read-only, that what it records is
// still there: the netns, each link's device or child with its addresses,
// and the SMC-R pnet entries.
func (in *inspector) attachment(dir string, rec *state.Record) Attachment {
	a := Attachment{
		Network: rec.Network, ContainerID: rec.ContainerID, IfName: rec.IfName,
		Mode: rec.ModeName(), NetNS: rec.NetNS, Created: rec.CreatedAt, DataDir: dir,
	}
	if rec.Pod.Name != "" {
		a.Pod = rec.Pod.Namespace + "/" + rec.Pod.Name
	}
	for _, l := range rec.Links {
		a.Links = append(a.Links, LinkState{Device: l.Device, Kind: l.Kind, PodName: l.PodName, Host: l.HostName, IPs: l.IPs,
			Step: l.Step, SoftRoCE: l.SoftRoCE})
	}
	if rec.SMC != nil {
		a.SMCR = fmt.Sprintf("pnetid %s: %s port %d, pod %s", rec.SMC.PnetID, rec.SMC.Device, rec.SMC.IBPort, rec.SMC.PodIfName)
	}
	if !rec.StrandedAt.IsZero() {
		a.Problems = append(a.Problems, "stranded since "+rec.StrandedAt.UTC().Format(time.RFC3339)+
			": its netns path is gone while the kernel keeps its RDMA device (a process holds the netns); the device stays held")
	}
	a.Problems = append(a.Problems, in.checkRecord(rec)...)
	a.Healthy = len(a.Problems) == 0
	return a
}

func (in *inspector) checkRecord(rec *state.Record) []string {
	if rec.NetNS == "" {
		return []string{errNoNetns.Error()}
	}
	gone, err := in.k.NetnsGone(rec)
	if err != nil {
		return []string{fmt.Sprintf("netns %s: %v", rec.NetNS, err)}
	}
	if gone {
		return []string{fmt.Sprintf("netns %s is gone (stale: reconcile or the runtime's DEL/GC releases it)", rec.NetNS)}
	}
	var probs []string
	ifaces, err := in.k.Interfaces(rec.NetNS)
	if err != nil {
		probs = append(probs, fmt.Sprintf("interfaces of netns %s: %v", rec.NetNS, err))
	}
	for _, l := range rec.Links {
		probs = append(probs, in.checkLink(rec, l, ifaces, err == nil)...)
	}
	return append(probs, in.checkSMC(rec)...)
}

func (in *inspector) checkLink(rec *state.Record, l state.Link, ifaces []Iface, haveIfaces bool) []string {
	var probs []string
	if l.Step != state.StepDone {
		probs = append(probs, fmt.Sprintf("%s: incomplete (step %q)", l.Device, l.Step))
	}
	if l.RDMAMoved {
		in, err := in.k.InNetns(l.Device, rec.NetNS)
		switch {
		case err != nil:
			probs = append(probs, fmt.Sprintf("RDMA device %s: %v", l.Device, err))
		case !in:
			probs = append(probs, fmt.Sprintf("RDMA device %s is not in the pod netns", l.Device))
		}
	}
	if l.SoftRoCE && !slices.ContainsFunc(in.r.RDMA.Devices, func(d Device) bool { return d.Name == l.Device }) {
		probs = append(probs, fmt.Sprintf("rxe device %s of the pod is gone", l.Device))
	}
	if l.PodName == "" || !haveIfaces {
		return probs
	}
	i := slices.IndexFunc(ifaces, func(i Iface) bool { return i.Name == l.PodName })
	if i < 0 {
		return append(probs, fmt.Sprintf("interface %s is missing from the pod netns", l.PodName))
	}
	if l.MAC != "" && !strings.EqualFold(ifaces[i].MAC, l.MAC) {
		probs = append(probs, fmt.Sprintf("interface %s has MAC %s, recorded %s", l.PodName, ifaces[i].MAC, l.MAC))
	}
	for _, ip := range l.IPs {
		if !slices.Contains(ifaces[i].Addrs, ip) {
			probs = append(probs, fmt.Sprintf("interface %s lacks address %s", l.PodName, ip))
		}
	}
	return probs
}

func (in *inspector) checkSMC(rec *state.Record) []string {
	s := rec.SMC
	if s == nil {
		return nil
	}
	var probs []string
	if s.HostEntry {
		want := PnetRow{PnetID: s.PnetID, IB: s.Device, IBPort: max(s.IBPort, 1)}
		if !slices.Contains(in.r.SMC.Pnet, want) && in.r.SMC.Available {
			probs = append(probs, fmt.Sprintf("init_net pnet entry %s ib %s port %d is missing", s.PnetID, s.Device, want.IBPort))
		}
	}
	if s.PodEntry {
		list, err := in.k.Pnet(rec.NetNS)
		rows := pnetRows(list)
		switch {
		case err != nil:
			probs = append(probs, fmt.Sprintf("pod pnet table: %v", err))
		case !slices.Contains(rows, PnetRow{PnetID: s.PnetID, Eth: s.PodIfName}):
			probs = append(probs, fmt.Sprintf("pod pnet entry %s eth %s is missing", s.PnetID, s.PodIfName))
		}
	}
	return probs
}
