// Command rdma-chain is a chained CNI plugin that gives Kubernetes pods RDMA:
// it moves or shares the node's RDMA devices into the pod's netns after the
// primary plugin has run, and gives them back on DEL. It serves only the CNI
// verbs; the operator commands are rdma-chain-ops.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// buildVersion is stamped by the Makefile with -ldflags.
var buildVersion = "dev"

func main() {
	cmd := os.Getenv("CNI_COMMAND")
	if cmd == "" && (len(os.Args) > 1 || isTerminal(os.Stdin)) {
		// A person, not a runtime: runtimes set CNI_COMMAND and pass no
		// arguments. Answer without reading stdin, which a terminal or an
		// open pipe never ends.
		printAbout(os.Stdout)
		return
	}
	// Netns switches apply to the OS thread: keep main on one, which is in
	// the host netns (nothing has switched yet). VERSION and STATUS touch
	// no netns: they skip it, and with it the runtime's template thread that
	// a first lock starts (STATUS comes every few seconds).
	if cmd != "VERSION" && cmd != "STATUS" {
		runtime.LockOSThread()
	}
	os.Exit(chain.Main(chain.New(chain.KernelEnv()), "rdma-chain "+buildVersion))
}

// printAbout says what the binary is, its version and the CNI versions it
// serves, as upstream plugins answer --help.
func printAbout(w io.Writer) {
	_, _ = fmt.Fprintf(w, `rdma-chain %s: a chained CNI plugin that gives Kubernetes pods RDMA
CNI protocol versions supported: %s

The container runtime runs it with CNI_COMMAND set and the network
configuration on stdin; it is not a command for people. On a node, use
rdma-chain-ops (inspect, validate, install, reconcile, uninstall).
`, buildVersion, strings.Join(config.SupportedVersions, ", "))
}

// isTerminal reports whether f is a terminal (TCGETS succeeds).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
