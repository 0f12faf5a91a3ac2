// Command svcproxy stands in, on a cluster-tier node, for the one thing
// kube-proxy would do there: take connections to the kubernetes Service's
// address (what in-cluster clients such as the DRA driver dial) to the API
// server's endpoint. The node has no kube-proxy: it would be one more part
// built from the proxy for a single Service.
//
//	svcproxy LISTEN_ADDR TARGET_ADDR
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: svcproxy LISTEN_ADDR TARGET_ADDR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy:", err)
			os.Exit(1)
		}
		go relay(c, os.Args[2])
	}
}

func relay(down net.Conn, target string) {
	defer down.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, down); _ = up.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(down, up)
}
