package inspect

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// DeviceUsage is what the processes of an attachment's pod hold on one
// RDMA device, from the RDMA core's resource tracking.
type DeviceUsage struct {
	Device  string   `json:"device"`
	QP      int      `json:"qp"`
	CQ      int      `json:"cq"`
	MR      int      `json:"mr"`
	PD      int      `json:"pd"`
	MRBytes uint64   `json:"mrBytes"`
	PIDs    []uint32 `json:"pids,omitempty"`
}

// readUsage gives each attachment with RDMA links whose netns lives what
// its pod's processes hold, per device (rdmares.ReadPods over recs).
func (in *inspector) readUsage(recs []*state.Record) {
	rep := rdmares.ReadPods(in.usage, recs, chain.HoldsDevice)
	for _, err := range rep.Errors {
		in.unreadable("RDMA usage", err)
	}
	for _, p := range rep.Pods {
		var du []DeviceUsage
		for _, dev := range slices.Sorted(maps.Keys(p.Usage)) {
			u := p.Usage[dev]
			du = append(du, DeviceUsage{Device: dev, QP: u.QP, CQ: u.CQ, MR: u.MR, PD: u.PD, MRBytes: u.MRBytes, PIDs: u.PIDs})
		}
		for i := range in.r.Attachments {
			a := &in.r.Attachments[i]
			if a.NetNS == p.Record.NetNS && len(a.Links) > 0 {
				a.Usage = du
			}
		}
	}
}

func writeUsageText(w io.Writer, du []DeviceUsage) {
	for _, u := range du {
		say.Printf(w, "    RDMA use %s: %d QP, %d CQ, %d MR (%d bytes), %d PD", u.Device, u.QP, u.CQ, u.MR, u.MRBytes, u.PD)
		if len(u.PIDs) > 0 {
			pids := make([]string, len(u.PIDs))
			for i, p := range u.PIDs {
				pids[i] = fmt.Sprint(p)
			}
			say.Printf(w, "; pids %s", strings.Join(pids, " "))
		}
		say.Println(w, "")
	}
}
