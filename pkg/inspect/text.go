package inspect

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// WriteText renders the report for people.
func WriteText(w io.Writer, r Report) {
	mode := r.RDMA.Mode
	if mode == "" {
		mode = "unknown"
	}
	say.Printf(w, "RDMA netns mode: %s\n", mode)
	if r.RDMA.PodSoftRoCE {
		say.Printf(w, "Soft-RoCE per pod (podSoftRoCE): served by this kernel\n")
	} else {
		say.Printf(w, "Soft-RoCE per pod (podSoftRoCE): refused: %s\n", r.RDMA.PodSoftRoCEReason)
	}
	say.Printf(w, "RDMA devices (%d):\n", len(r.RDMA.Devices))
	for _, d := range r.RDMA.Devices {
		say.Printf(w, "  %s  driver %s  netdev %s  netns %s%s\n", d.Name, orDash(d.Driver), orDash(d.Netdev), d.Netns, portsText(d.Ports))
	}
	writeSMCText(w, r.SMC)
	say.Printf(w, "Attachments (%d):\n", len(r.Attachments))
	for _, a := range r.Attachments {
		writeAttachmentText(w, a)
	}
	say.Printf(w, "Last failure per pod (%d):\n", len(r.Failures))
	for _, f := range r.Failures {
		writeFailureText(w, f)
	}
	if r.Netns != nil {
		writeNetnsText(w, r.Netns)
	}
	if len(r.Unreadable) > 0 {
		say.Printf(w, "Could not read (%d):\n", len(r.Unreadable))
		for _, u := range r.Unreadable {
			say.Printf(w, "  %s: %s\n", u.What, u.Error)
		}
	}
}

func portsText(ports []rdma.Port) string {
	var b strings.Builder
	for _, p := range ports {
		say.Printf(&b, "  port %d %s", p.Port, orDash(p.State))
		if p.PhysState != "" {
			say.Printf(&b, " (%s)", p.PhysState)
		}
		say.Printf(&b, " %d GIDs", p.GIDs)
	}
	return b.String()
}

func writeSMCText(w io.Writer, s SMCReport) {
	if !s.Available {
		say.Printf(w, "SMC: not available (%s)\n", orDash(s.Reason))
		say.Printf(w, "  transparent SMC (smcr.transparent auto): %s; kernel offers %s\n", s.Transparent, s.Offer)
		return
	}
	say.Printf(w, "SMC: available; UEIDs: %s\n", orDash(strings.Join(s.UEIDs, ", ")))
	say.Printf(w, "  transparent SMC (smcr.transparent auto): %s; kernel offers %s\n", s.Transparent, s.Offer)
	say.Printf(w, "  init_net pnet table (%d):\n", len(s.Pnet))
	for _, p := range s.Pnet {
		say.Printf(w, "    %s\n", pnetText(p))
	}
	if h := s.Hook; h != nil {
		state := "attached"
		if !h.Attached {
			state = "NOT attached (pinned map only)"
		} else if h.Held {
			state = "attached, held by the reconcile daemon"
		}
		say.Printf(w, "  socket hook (smcr.transparent bpf): %s, %d netns listed %v\n", state, len(h.Netns), h.Netns)
	}
}

func pnetText(p PnetRow) string {
	if p.IB != "" {
		return fmt.Sprintf("%s ib %s port %d", p.PnetID, p.IB, p.IBPort)
	}
	return fmt.Sprintf("%s eth %s", p.PnetID, p.Eth)
}

func writeAttachmentText(w io.Writer, a Attachment) {
	say.Printf(w, "  %s/%s/%s  pod %s  %s  netns %s  since %s\n", a.Network, shortID(a.ContainerID), a.IfName,
		orDash(a.Pod), a.Mode, orDash(a.NetNS), a.Created.UTC().Format(time.RFC3339))
	for _, l := range a.Links {
		say.Printf(w, "    link %s %s", l.Device, l.Kind)
		if l.SoftRoCE {
			say.Printf(w, " (the pod's own rxe device)")
		}
		if l.PodName != "" {
			say.Printf(w, " as %s", l.PodName)
		}
		if l.Host != "" {
			say.Printf(w, " (host %s)", l.Host)
		}
		if len(l.IPs) > 0 {
			say.Printf(w, " ips %s", strings.Join(l.IPs, " "))
		}
		say.Printf(w, " step %s\n", l.Step)
	}
	if a.SMCR != "" {
		say.Printf(w, "    SMC-R %s\n", a.SMCR)
	}
	writeUsageText(w, a.Usage)
	if a.Healthy {
		say.Println(w, "    healthy")
	}
	for _, p := range a.Problems {
		say.Printf(w, "    PROBLEM: %s\n", p)
	}
}

func writeFailureText(w io.Writer, f Failure) {
	who := f.Pod
	if who == "" {
		who = "container " + shortID(f.ContainerID)
	}
	say.Printf(w, "  %s  %s  code %d  at %s  %s/%s: %s\n", who, f.Verb, f.Code,
		f.Time.UTC().Format(time.RFC3339), shortID(f.ContainerID), orDash(f.IfName), f.Msg)
	if f.Since != "" {
		say.Printf(w, "    since then: %s\n", f.Since)
	}
}

func writeNetnsText(w io.Writer, n *NetnsReport) {
	say.Printf(w, "Netns %s:\n", n.Path)
	for _, i := range n.Interfaces {
		state := "down"
		if i.Up {
			state = "up"
		}
		tag := ""
		if i.RDMA {
			tag = "  [RDMA]"
		}
		say.Printf(w, "  %s %s %s %s%s\n", i.Name, i.Kind, state, orDash(i.MAC), tag)
		for _, a := range i.Addrs {
			say.Printf(w, "    inet %s\n", a)
		}
		for _, g := range i.GIDs {
			say.Printf(w, "    GID %s port %d index %d %s %s\n", g.Device, g.Port, g.Index, g.GID, g.Type)
		}
	}
	say.Printf(w, "  pnet table (%d):\n", len(n.Pnet))
	for _, p := range n.Pnet {
		say.Printf(w, "    %s\n", pnetText(p))
	}
	if len(n.SMCSysctls) > 0 {
		keys := make([]string, 0, len(n.SMCSysctls))
		for k := range n.SMCSysctls {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		say.Println(w, "  net.smc:")
		for _, k := range keys {
			say.Printf(w, "    %s = %s\n", k, n.SMCSysctls[k])
		}
	}
	if fb := n.Fallbacks; fb != nil {
		say.Printf(w, "  SMC fallbacks to TCP: server %d, client %d\n", fb.ServerTotal, fb.ClientTotal)
		for _, s := range fb.Reasons {
			side := "client"
			if s.Server {
				side = "server"
			}
			say.Printf(w, "    %s reason 0x%08x x%d\n", side, s.Reason, s.Count)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortID shortens a runtime's 64-hex container ID for text output.
func shortID(id string) string {
	if len(id) > 16 {
		return id[:13] + "..."
	}
	return id
}
