// Command rdma-chain is a chained CNI plugin that gives Kubernetes pods RDMA:
// it moves or shares the node's RDMA devices into the pod's netns after the
// primary plugin has run, and gives them back on DEL. It serves only the CNI
// verbs; the operator commands are rdma-chain-ops.
package main

import (
	"os"
	"runtime"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
)

// buildVersion is stamped by the Makefile with -ldflags.
var buildVersion = "dev"

func main() {
	// Netns switches apply to the OS thread: keep main on one, which is in
	// the host netns (nothing has switched yet). VERSION and STATUS touch
	// no netns: they skip it, and with it the runtime's template thread that
	// a first lock starts (STATUS comes every few seconds).
	if v := os.Getenv("CNI_COMMAND"); v != "VERSION" && v != "STATUS" {
		runtime.LockOSThread()
	}
	os.Exit(chain.Main(chain.New(chain.KernelEnv()), "rdma-chain "+buildVersion))
}
