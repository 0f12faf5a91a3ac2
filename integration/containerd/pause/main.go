// Command pause is the containerd tier's pod sandbox process: the locally
// built stand-in for registry.k8s.io/pause, since no registry is reachable.
// It sleeps until SIGTERM or SIGINT and exits 0. The test builds it static
// (CGO_ENABLED=0) and packs it as the image localhost/pause:test.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	os.Exit(0)
}
