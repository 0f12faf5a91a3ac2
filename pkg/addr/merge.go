package addr

import (
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// MergeResult appends copies of res's IPs and routes to dst (the chain's
// result) after dst's existing ones, pointing each appended IP's Interface
// at dst.Interfaces index ifIndex. DNS and interfaces are left untouched;
// nil dst or res is a no-op.
func MergeResult(dst *types100.Result, res *types100.Result, ifIndex int) {
	if dst == nil || res == nil {
		return
	}
	for _, ipc := range res.IPs {
		if ipc == nil {
			continue
		}
		c := ipc.Copy()
		c.Interface = types100.Int(ifIndex)
		dst.IPs = append(dst.IPs, c)
	}
	for _, r := range res.Routes {
		if r != nil {
			dst.Routes = append(dst.Routes, r.Copy())
		}
	}
}
