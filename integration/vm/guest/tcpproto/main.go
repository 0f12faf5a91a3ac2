// Command tcpproto is an unmodified TCP program for the VM tier's
// transparent SMC scenario: it uses only Go's net package (underneath
// socket(AF_INET, SOCK_STREAM, 0)) and prints the protocol the kernel gave
// each socket it created (SO_PROTOCOL: 6 TCP, 256 SMC, 262 MPTCP), read in
// the net package's Control hook right after socket() and before
// connect/listen: once an SMC connection falls back to TCP, the kernel
// swaps the descriptor over to SMC's internal TCP socket, so a later read
// would say 6.
//
//	tcpproto server ADDR:PORT   accept one connection and echo a line
//	tcpproto client ADDR:PORT   connect, send a line, read it back
//	tcpproto probe              create a socket (connect to 127.0.0.1:9, refused or not)
//
// Each prints "ROLE created proto=N" and, after the exchange, "ROLE proto=N".
// Exit status: 0 ok, 1 error, 2 usage.
package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "server":
		err = serve(os.Args[2])
	case len(os.Args) == 3 && os.Args[1] == "client":
		err = dial(os.Args[2])
	case len(os.Args) == 2 && os.Args[1] == "probe":
		d := net.Dialer{Timeout: 2 * time.Second, Control: created("probe")}
		if c, err := d.Dial("tcp4", "127.0.0.1:9"); err == nil {
			c.Close()
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: tcpproto server|client ADDR:PORT | probe")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpproto:", err)
		os.Exit(1)
	}
}

// created prints the protocol of a socket the net package just created.
func created(role string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		p, err := protocol(c)
		fmt.Printf("%s created proto=%d\n", role, p)
		return err
	}
}

func serve(addr string) error {
	lc := net.ListenConfig{Control: created("listener")}
	l, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if _, err := c.Write([]byte(line)); err != nil {
		return err
	}
	return report("server", c.(*net.TCPConn))
}

func dial(addr string) error {
	d := net.Dialer{Timeout: 20 * time.Second, Control: created("client")}
	c, err := d.Dial("tcp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("hello over whatever the kernel gave us\n")); err != nil {
		return err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return err
	}
	return report("client", c.(*net.TCPConn))
}

func report(role string, s syscall.Conn) error {
	rc, err := s.SyscallConn()
	if err != nil {
		return err
	}
	p, err := protocol(rc)
	fmt.Printf("%s proto=%d\n", role, p)
	return err
}

// protocol reads SO_PROTOCOL of the socket behind c.
func protocol(c syscall.RawConn) (int, error) {
	var p int
	var perr error
	if err := c.Control(func(fd uintptr) {
		p, perr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
	}); err != nil {
		return 0, err
	}
	return p, perr
}
