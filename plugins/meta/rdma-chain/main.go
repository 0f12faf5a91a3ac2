// Command rdma-chain is a chained CNI plugin that gives Kubernetes pods RDMA:
// it moves or shares the node's RDMA devices into the pod's netns after the
// primary plugin has run, and gives them back on DEL.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
)

// buildVersion is stamped by the Makefile with -ldflags.
var buildVersion = "dev"

func init() {
	// Netns switches apply to the OS thread: keep main on one.
	runtime.LockOSThread()
}

func main() {
	p := chain.New(chain.KernelEnv())
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    p.Add,
		Del:    p.Del,
		Check:  p.Check,
		GC:     p.GC,
		Status: p.Status,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "rdma-chain "+buildVersion)
}
