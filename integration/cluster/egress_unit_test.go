//go:build cluster

package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// echoServer answers each connection with what it reads, upper-cased per
// line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintln(c, strings.ToUpper(sc.Text()))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestEgressProxy checks that CONNECT to a routed node address reaches
// its loopback port both ways; any other target is refused.
func TestEgressProxy(t *testing.T) {
	p := startEgressProxy(t, t.TempDir())
	p.route("192.168.50.11:10250", echoServer(t))
	for _, tc := range []struct {
		target string
		status int
	}{{"192.168.50.11:10250", http.StatusOK}, {"192.168.50.12:10250", http.StatusForbidden}, {"127.0.0.1:22", http.StatusForbidden}} {
		c, err := net.Dial("unix", p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.target, tc.target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %s, want %d", tc.target, resp.Status, tc.status)
		}
		if tc.status == http.StatusOK {
			fmt.Fprintln(c, "hello kubelet")
			if l, err := br.ReadString('\n'); err != nil || l != "HELLO KUBELET\n" {
				t.Errorf("%s: read %q, %v", tc.target, l, err)
			}
		}
		resp.Body.Close()
		c.Close()
	}
}

// TestFwd checks that the guestfwd copier carries a conversation both
// ways and ends when the server closes.
func TestFwd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fwd")
	testenv.Build(t, bin, "./integration/cluster/fwd", "")
	cmd := exec.Command(bin, echoServer(t))
	cmd.Stdin = strings.NewReader("one\ntwo\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fwd: %v", err)
	}
	if string(out) != "ONE\nTWO\n" {
		t.Errorf("fwd copied %q", out)
	}
	if err := exec.Command(bin, "127.0.0.1:1").Run(); err == nil {
		t.Error("fwd to a closed port succeeded")
	}
	// -listen: each connection to the listening address is relayed.
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := exec.Command(bin, "-listen", listen, echoServer(t))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			return false, err.Error()
		}
		defer c.Close()
		_, _ = c.Write([]byte("three\n"))
		_ = c.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(c)
		return string(got) == "THREE\n", fmt.Sprintf("fwd -listen copied %q", got)
	})
}
