// Command fwd relays one TCP conversation, passing half-closes on, in the
// two places the cluster tier needs one:
//
//	fwd HOST:PORT                stdin/stdout <-> HOST:PORT. The node VMs
//	                             reach the API server on the host's loopback
//	                             through it: qemu's user network runs one per
//	                             guest connection (guestfwd=...-cmd:fwd
//	                             HOST:PORT), so a guest reaches nothing else.
//	fwd -listen ADDR HOST:PORT   every connection to ADDR <-> HOST:PORT. On a
//	                             node it stands in for the one thing kube-proxy
//	                             would do there: the kubernetes Service's
//	                             address (what in-cluster clients such as the
//	                             DRA driver dial) to the API server's endpoint.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	switch {
	case len(os.Args) == 2:
		c, err := net.Dial("tcp", os.Args[1])
		if err != nil {
			fail(err)
		}
		relay(os.Stdin, os.Stdout, c)
	case len(os.Args) == 4 && os.Args[1] == "-listen":
		ln, err := net.Listen("tcp", os.Args[2])
		if err != nil {
			fail(err)
		}
		for {
			down, err := ln.Accept()
			if err != nil {
				fail(err)
			}
			go func() {
				defer down.Close()
				if up, err := net.Dial("tcp", os.Args[3]); err == nil {
					relay(down, down, up)
				}
			}()
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: fwd HOST:PORT | fwd -listen ADDR HOST:PORT")
		os.Exit(2)
	}
}

// relay copies in to up and up to out; when in ends, up's write side is
// closed so the far end sees the half-close.
func relay(in io.Reader, out io.Writer, up net.Conn) {
	go func() {
		_, _ = io.Copy(up, in)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(out, up)
	_ = up.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fwd:", err)
	os.Exit(1)
}
