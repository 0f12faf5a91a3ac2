package addr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestSyncHostLocalLeasesRealStore checks that the path rule is
// host-local's own: the lease the real plugin took is the file synced.
func TestSyncHostLocalLeasesRealStore(t *testing.T) {
	bin := testenv.RequireBinary(t, "host-local", testenv.ToolsDir("cni", "bin"))
	dataDir := t.TempDir()
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"rdmanet","type":"rdma-chain","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"fd00:99::/120"}]]}}`, dataDir)
	res, err := Exec().Add(context.Background(), Request{PluginType: "host-local", NetConf: []byte(conf),
		ContainerID: "c1", NetNS: "/var/run/netns/rc-no-such-netns", IfName: "rdma0", Path: filepath.Dir(bin)})
	if err != nil || len(res.IPs) != 1 {
		t.Fatalf("host-local ADD: %v %+v", err, res)
	}
	ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	if err := SyncHostLocalLeases(dataDir, "rdmanet", []netip.Addr{ip.Unmap()}); err != nil {
		t.Fatalf("sync of host-local's lease %s: %v", ip, err)
	}
}

func TestSyncHostLocalLeases(t *testing.T) {
	ip := netip.MustParseAddr("fd00:99::2")
	for _, tc := range []struct {
		name    string
		network string
		setup   func(t *testing.T, store string)
		errno   error // nil: no error
	}{
		{"lease on disk", "net", func(t *testing.T, store string) { writeLease(t, store, ip.String()) }, nil},
		{"no addresses", "net", func(t *testing.T, store string) {}, nil},
		{"lease missing", "net", func(t *testing.T, store string) {}, unix.ENOENT},
		{"lease is a symlink", "net", func(t *testing.T, store string) {
			writeLease(t, store, "target")
			if err := os.Symlink("target", filepath.Join(store, ip.String())); err != nil {
				t.Fatal(err)
			}
		}, unix.ELOOP},
		{"store is a symlink", "net", func(t *testing.T, store string) {
			real := store + "-real"
			writeLease(t, real, ip.String())
			if err := os.Remove(store); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, store); err != nil {
				t.Fatal(err)
			}
		}, unix.ENOTDIR}, // O_DIRECTORY|O_NOFOLLOW on a symlink
		{"network names a parent", "..", func(t *testing.T, store string) {}, errNotAStore},
		{"network has a slash", "a/b", func(t *testing.T, store string) {}, errNotAStore},
		{"no network", "", func(t *testing.T, store string) {}, errNotAStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			store := filepath.Join(dataDir, "net")
			if err := os.MkdirAll(store, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, store)
			ips := []netip.Addr{ip}
			if tc.name == "no addresses" {
				ips = nil
			}
			err := SyncHostLocalLeases(dataDir, tc.network, ips)
			switch {
			case tc.errno == nil && err != nil:
				t.Errorf("got %v, want no error", err)
			case tc.errno != nil && !errors.Is(err, tc.errno):
				t.Errorf("got %v, want %v", err, tc.errno)
			}
		})
	}
}

func writeLease(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("c1\r\nrdma0"), 0o644); err != nil {
		t.Fatal(err)
	}
}
