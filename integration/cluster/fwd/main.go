// Command fwd copies its stdin to a TCP connection and the connection to its
// stdout. The cluster tier's node VMs reach the API server on the host's
// loopback through it: qemu's user network runs one per guest connection
// (guestfwd=tcp:ADDR:PORT-cmd:fwd HOST:PORT), so the guest can reach nothing
// else on the host.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fwd HOST:PORT")
		os.Exit(2)
	}
	c, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fwd:", err)
		os.Exit(1)
	}
	go func() {
		// The guest closed its side: pass the half-close on.
		_, _ = io.Copy(c, os.Stdin)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(os.Stdout, c)
	_ = c.Close()
}
