package conflist

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDiscoverNetworks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("05-other.conflist", `{"cniVersion":"1.0.0","name":"plain","plugins":[{"type":"ptp"}]}`)
	write("10-rdma.conflist", `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"},{"type":"rdma-chain","dataDir":"/var/lib/cni/r"}]}`)
	write("20-bad.conflist", `{"cniVersion":"1.0.0","name":"bad","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"sideways"}]}`)
	write("30-single.conf", `{"cniVersion":"1.0.0","name":"single","type":"rdma-chain"}`)
	if err := os.Symlink(filepath.Join(dir, "10-rdma.conflist"), filepath.Join(dir, "40-link.conflist")); err != nil {
		t.Fatal(err)
	}
	nets, skipped, err := Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(nets) != 1 || nets[0].Name != "rdmanet" || nets[0].DataDir != "/var/lib/cni/r" {
		t.Errorf("networks %+v", nets)
	}
	var why []string
	for _, e := range skipped {
		why = append(why, e.Error())
	}
	if len(why) != 2 || !strings.Contains(why[0], "20-bad.conflist") || !strings.Contains(why[1], "40-link.conflist: a symlink, not followed") {
		t.Errorf("skipped %q", why)
	}
	if _, _, err := Discover(t.TempDir()); err == nil || !strings.Contains(err.Error(), "has an rdma-chain entry") {
		t.Errorf("empty dir: %v", err)
	}
	t.Setenv("NETCONFPATH", dir)
	if DefaultConfDir() != dir {
		t.Errorf("NETCONFPATH not used: %s", DefaultConfDir())
	}
	t.Setenv("NETCONFPATH", "")
	if DefaultConfDir() != "/etc/cni/net.d" {
		t.Errorf("default %s", DefaultConfDir())
	}
}

func TestNetworkFromConflist(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10.conflist")
	list := `{"cniVersion":"0.4.0","name":"terway-chainer","plugins":[{"type":"terway"},
  {"type":"rdma-chain","dataDir":"/var/lib/cni/x","ipam":{"type":"host-local","ranges":[[{"subnet":"fd00::/64"}]]}}]}`
	if err := os.WriteFile(path, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := FromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cniVersion": "0.4.0", "name": "terway-chainer", "type": "rdma-chain", "dataDir": "/var/lib/cni/x", "ipam": {"type":"host-local","ranges":[[{"subnet":"fd00::/64"}]]}}`
	if n.Name != "terway-chainer" || n.DataDir != "/var/lib/cni/x" || string(n.Stdin) != want {
		t.Errorf("network %q %q\n%s", n.Name, n.DataDir, n.Stdin)
	}
	if _, err := FromFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing conflist: no error")
	}
}

// TestDiscoverRefusesFIFO checks that a FIFO in the conflist directory
// (it blocks a plain read forever) is named and skipped; the directory's
// networks are still found.
func TestDiscoverRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "05-fifo.conflist"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"},{"type":"rdma-chain"}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-rdma.conflist"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		nets    []Network
		skipped []error
		err     error
	}
	done := make(chan result, 1)
	go func() {
		nets, skipped, err := Discover(dir)
		done <- result{nets, skipped, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.nets) != 1 || len(r.skipped) != 1 || !strings.Contains(r.skipped[0].Error(), "05-fifo.conflist: not a regular file") {
			t.Errorf("Discover = %+v, skipped %v, %v", r.nets, r.skipped, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Discover blocked on a FIFO")
	}
}
