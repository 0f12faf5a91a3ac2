//go:build failpoint

package failpoint

import (
	"fmt"
	"os"
	"syscall"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

// Hit records name in the trace file and kills the process with SIGKILL when
// name is the configured failpoint.
func Hit(name string) {
	if trace := os.Getenv("RDMA_CHAIN_FAILPOINT_TRACE"); trace != "" {
		if f, err := os.OpenFile(trace, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
			fmt.Fprintln(f, name)
			_ = f.Close()
		}
	}
	if os.Getenv("RDMA_CHAIN_FAILPOINT") == name {
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
