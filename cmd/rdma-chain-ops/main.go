// Command rdma-chain-ops holds the operator commands of rdma-chain: inspect
// (what the node and its pods have), validate (is a conflist right),
// install (put the plugin's entry into a conflist atomically), uninstall
// (take it out, then the binaries) and reconcile (release the attachments
// of pods that are gone; long-running in the DaemonSet). The CNI plugin, bin/rdma-chain, serves only the CNI verbs: it
// is started for every pod and links none of this.
package main

import (
	"os"
	"runtime"
)

// buildVersion is stamped by the Makefile with -ldflags.
var buildVersion = "dev"

func main() {
	// inspect and reconcile enter pod netns; netns switches apply to the OS
	// thread, so main stays on one, which is in the host netns.
	runtime.LockOSThread()
	os.Exit(Main(os.Args[1:], buildVersion, IO{Stdout: os.Stdout, Stderr: os.Stderr}))
}
