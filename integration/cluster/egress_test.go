//go:build cluster

package cluster

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// egressProxy is the API server's way to the nodes' kubelets (logs, exec):
// an HTTP CONNECT proxy on a unix socket named by its
// EgressSelectorConfiguration ("cluster"), as konnectivity is on managed
// control planes (over TCP the API server requires a client certificate for
// the proxy; a socket in the test's own directory needs none). A node's address
// (192.168.50.1N:10250, on the VMs' own segment) maps to the loopback port
// qemu forwards to that guest's kubelet; every other target is refused.
type egressProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	routes map[string]string // node address:port -> 127.0.0.1:port
}

func startEgressProxy(t *testing.T, dir string) *egressProxy {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "egress.sock"))
	if err != nil {
		t.Fatal(err)
	}
	p := &egressProxy{ln: ln, routes: map[string]string{}}
	srv := &http.Server{Handler: http.HandlerFunc(p.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

func (p *egressProxy) route(target, hostAddr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[target] = hostAddr
}

func (p *egressProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	to, ok := p.routes[r.Host]
	p.mu.Unlock()
	if r.Method != http.MethodConnect || !ok {
		http.Error(w, fmt.Sprintf("no route to %s", r.Host), http.StatusForbidden)
		return
	}
	up, err := net.Dial("tcp", to)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "no hijack", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, _ = down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go pipe(up, rw.Reader, down)
	pipe(down, up, up)
}

// pipe copies from src to dst and closes both ends it was given.
func pipe(dst io.Writer, src io.Reader, closer io.Closer) {
	_, _ = io.Copy(dst, src)
	_ = closer.Close()
	if c, ok := dst.(io.Closer); ok {
		_ = c.Close()
	}
}

// writeConfig writes the API server's --egress-selector-config-file.
func (p *egressProxy) writeConfig(dir string) (string, error) {
	path := filepath.Join(dir, "egress.yaml")
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, p.ln.Addr())
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
