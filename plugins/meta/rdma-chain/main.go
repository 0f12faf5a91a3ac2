// Command rdma-chain is a chained CNI plugin that gives Kubernetes pods RDMA:
// it moves or shares the node's RDMA devices into the pod's netns after the
// primary plugin has run, and gives them back on DEL. Started without
// CNI_COMMAND, it runs the operator commands (inspect, validate, install,
// reconcile).
package main

import (
	"os"
	"runtime"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/ops"
)

// buildVersion is stamped by the Makefile with -ldflags.
var buildVersion = "dev"

func main() {
	// Netns switches apply to the OS thread: keep main on one, which is in
	// the host netns (nothing has switched yet). VERSION and STATUS touch
	// no netns: they skip it, and with it the runtime's template thread that
	// a first lock starts (0.3 ms of the start-up under GODEBUG=inittrace=1,
	// where the lock used to be in init; STATUS comes every few seconds).
	if v := os.Getenv("CNI_COMMAND"); v != "VERSION" && v != "STATUS" {
		runtime.LockOSThread()
	}
	if os.Getenv("CNI_COMMAND") == "" && !runtimeCall() {
		os.Exit(ops.Main(os.Args[1:], buildVersion, ops.IO{Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	os.Exit(chain.Main(chain.New(chain.KernelEnv()), "rdma-chain "+buildVersion))
}

// runtimeCall reports whether a runtime called the plugin (it sets CNI_*
// variables) but left CNI_COMMAND out: it gets the CNI library's error
// (code 4), not the operator commands' usage.
func runtimeCall() bool {
	for _, v := range []string{"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH", "CNI_ARGS"} {
		if _, ok := os.LookupEnv(v); ok {
			return true
		}
	}
	return false
}
