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

func init() {
	// Netns switches apply to the OS thread: keep main on one.
	runtime.LockOSThread()
}

func main() {
	if os.Getenv("CNI_COMMAND") == "" {
		os.Exit(ops.Main(os.Args[1:], buildVersion, ops.IO{Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	os.Exit(chain.Main(chain.New(chain.KernelEnv()), "rdma-chain "+buildVersion))
}
