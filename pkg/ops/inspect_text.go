package ops

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// writeText renders the report for people.
func writeText(w io.Writer, r Report) {
	mode := r.RDMA.Mode
	if mode == "" {
		mode = "unknown"
	}
	fmt.Fprintf(w, "RDMA netns mode: %s\n", mode)
	fmt.Fprintf(w, "RDMA devices (%d):\n", len(r.RDMA.Devices))
	for _, d := range r.RDMA.Devices {
		fmt.Fprintf(w, "  %s  driver %s  netdev %s  netns %s%s\n", d.Name, orDash(d.Driver), orDash(d.Netdev), d.Netns, portsText(d.Ports))
	}
	writeSMCText(w, r.SMC)
	fmt.Fprintf(w, "Attachments (%d):\n", len(r.Attachments))
	for _, a := range r.Attachments {
		writeAttachmentText(w, a)
	}
	fmt.Fprintf(w, "Last failure per pod (%d):\n", len(r.Failures))
	for _, f := range r.Failures {
		writeFailureText(w, f)
	}
	if r.Netns != nil {
		writeNetnsText(w, r.Netns)
	}
	if len(r.Unreadable) > 0 {
		fmt.Fprintf(w, "Could not read (%d):\n", len(r.Unreadable))
		for _, u := range r.Unreadable {
			fmt.Fprintf(w, "  %s: %s\n", u.What, u.Error)
		}
	}
}

func portsText(ports []Port) string {
	var b strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&b, "  port %d %s", p.Port, orDash(p.State))
		if p.PhysState != "" {
			fmt.Fprintf(&b, " (%s)", p.PhysState)
		}
		fmt.Fprintf(&b, " %d GIDs", p.GIDs)
	}
	return b.String()
}

func writeSMCText(w io.Writer, s SMCReport) {
	if !s.Available {
		fmt.Fprintf(w, "SMC: not available (%s)\n", orDash(s.Reason))
		return
	}
	fmt.Fprintf(w, "SMC: available; UEIDs: %s\n", orDash(strings.Join(s.UEIDs, ", ")))
	fmt.Fprintf(w, "  init_net pnet table (%d):\n", len(s.Pnet))
	for _, p := range s.Pnet {
		fmt.Fprintf(w, "    %s\n", pnetText(p))
	}
}

func pnetText(p PnetRow) string {
	if p.IB != "" {
		return fmt.Sprintf("%s ib %s port %d", p.PnetID, p.IB, p.IBPort)
	}
	return fmt.Sprintf("%s eth %s", p.PnetID, p.Eth)
}

func writeAttachmentText(w io.Writer, a Attachment) {
	fmt.Fprintf(w, "  %s/%s/%s  pod %s  %s  netns %s  since %s\n", a.Network, shortID(a.ContainerID), a.IfName,
		orDash(a.Pod), a.Mode, orDash(a.NetNS), a.Created.UTC().Format(time.RFC3339))
	for _, l := range a.Links {
		fmt.Fprintf(w, "    link %s %s", l.Device, l.Kind)
		if l.PodName != "" {
			fmt.Fprintf(w, " as %s", l.PodName)
		}
		if l.Host != "" {
			fmt.Fprintf(w, " (host %s)", l.Host)
		}
		if len(l.IPs) > 0 {
			fmt.Fprintf(w, " ips %s", strings.Join(l.IPs, " "))
		}
		fmt.Fprintf(w, " step %s\n", l.Step)
	}
	if a.SMCR != "" {
		fmt.Fprintf(w, "    SMC-R %s\n", a.SMCR)
	}
	if a.Healthy {
		fmt.Fprintln(w, "    healthy")
	}
	for _, p := range a.Problems {
		fmt.Fprintf(w, "    PROBLEM: %s\n", p)
	}
}

func writeFailureText(w io.Writer, f Failure) {
	who := f.Pod
	if who == "" {
		who = "container " + shortID(f.ContainerID)
	}
	fmt.Fprintf(w, "  %s  %s  code %d  at %s  %s/%s: %s\n", who, f.Verb, f.Code,
		f.Time.UTC().Format(time.RFC3339), shortID(f.ContainerID), orDash(f.IfName), f.Msg)
	if f.Since != "" {
		fmt.Fprintf(w, "    since then: %s\n", f.Since)
	}
}

func writeNetnsText(w io.Writer, n *NetnsReport) {
	fmt.Fprintf(w, "Netns %s:\n", n.Path)
	for _, i := range n.Interfaces {
		state := "down"
		if i.Up {
			state = "up"
		}
		tag := ""
		if i.RDMA {
			tag = "  [RDMA]"
		}
		fmt.Fprintf(w, "  %s %s %s %s%s\n", i.Name, i.Kind, state, orDash(i.MAC), tag)
		for _, a := range i.Addrs {
			fmt.Fprintf(w, "    inet %s\n", a)
		}
		for _, g := range i.GIDs {
			fmt.Fprintf(w, "    GID %s port %d index %d %s %s\n", g.Device, g.Port, g.Index, g.GID, g.Type)
		}
	}
	fmt.Fprintf(w, "  pnet table (%d):\n", len(n.Pnet))
	for _, p := range n.Pnet {
		fmt.Fprintf(w, "    %s\n", pnetText(p))
	}
	if len(n.SMCSysctls) > 0 {
		keys := make([]string, 0, len(n.SMCSysctls))
		for k := range n.SMCSysctls {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "  net.smc:")
		for _, k := range keys {
			fmt.Fprintf(w, "    %s = %s\n", k, n.SMCSysctls[k])
		}
	}
	if fb := n.Fallbacks; fb != nil {
		fmt.Fprintf(w, "  SMC fallbacks to TCP: server %d, client %d\n", fb.ServerTotal, fb.ClientTotal)
		for _, s := range fb.Reasons {
			side := "client"
			if s.Server {
				side = "server"
			}
			fmt.Fprintf(w, "    %s reason 0x%08x x%d\n", side, s.Reason, s.Count)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
