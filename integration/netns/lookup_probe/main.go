// Command lookup_probe is the pod-resources lookup of the plugin's ADD in a
// process of its own, linking what the lookup links (pkg/podres) and little
// else: `make bench` starts it once per sample and reads the wall and CPU
// microseconds of the one lookup it prints. Bench-only; never shipped.
//
//	lookup_probe SOCKET NAMESPACE NAME RESOURCE
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: lookup_probe SOCKET NAMESPACE NAME RESOURCE")
		os.Exit(2)
	}
	cpu0, start := cpu(), time.Now()
	allocs, err := podres.New(os.Args[1], 0).Allocated(context.Background(), os.Args[2], os.Args[3], []string{os.Args[4]})
	took, used := time.Since(start), cpu()-cpu0
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(took.Microseconds(), used.Microseconds(), len(allocs))
}
