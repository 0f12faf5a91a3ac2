package chain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// ipamNode is a shared-mode node whose IPAM is the real host-local plugin;
// macvlan children stand in for ipvlan (this kernel has none).
func ipamNode(t *testing.T, dad bool) (n *node, conf, leases string) {
	t.Helper()
	n = newNode(t, rdma.ModeShared)
	n.cniPath = filepath.Dir(testenv.RequireBinary(t, "host-local", testenv.ToolsDir("cni", "bin")))
	leases = t.TempDir()
	conf = `,"podSelection":"all","sharedLink":{"type":"macvlan"},"ipam":{"type":"host-local","dataDir":"` + leases +
		`","ranges":[[{"subnet":"fd00:77::/64","rangeStart":"fd00:77::10","gateway":"fd00:77::1"}]],"routes":[{"dst":"fd00:88::/64"}]}`
	if dad {
		conf += `,"dad":true`
	}
	return n, conf, leases
}

func leaseCount(t *testing.T, dir string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "rdmanet", "fd00:77::*"))
	return len(files)
}

// TestIPv6OnRDMAInterface checks that the pod's RDMA interface gets the
// IPAM's IPv6 address (settled), its routes and per-interface sysctls; the
// result at 0.4.0 and 1.0.0 carries rdma0's entry but not its address
// (reportIPs is off); DEL and GC release the lease.
func TestIPv6OnRDMAInterface(t *testing.T) {
	testenv.Privileged(t)
	for _, tc := range []struct {
		ver string
		dad bool
	}{{"0.4.0", false}, {"1.0.0", true}} {
		t.Run(tc.ver, func(t *testing.T) {
			n, conf, leases := ipamNode(t, tc.dad)
			pod := netnstest.NewNS(t)
			prev := prevResult100
			if tc.ver == "0.4.0" {
				prev = prevResult040
			}
			if err := n.runAt(tc.ver, add, pod, conf, prev); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			assertIPv6Result(t, n.w.stdout.Bytes(), tc.ver)
			link, _ := netnstest.Snapshot(t, pod, "rdma0")
			if len(link.Addrs) != 1 || link.Addrs[0] != "fd00:77::10/64" {
				t.Errorf("rdma0 addrs %v", link.Addrs)
			}
			assertSysctl(t, pod, "net/ipv6/conf/rdma0/disable_ipv6", "0")
			assertSysctl(t, pod, "net/ipv6/conf/rdma0/keep_addr_on_down", "1")
			assertRoute(t, pod, "fd00:88::/64", "fd00:77::1")
			if leaseCount(t, leases) != 1 {
				t.Fatal("no lease taken")
			}
			if err := n.runAt(tc.ver, del, pod, conf, ""); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if leaseCount(t, leases) != 0 {
				t.Error("DEL kept the lease")
			}
		})
	}
}

// TestIPv6DADFailureReleases checks that, when DAD finds the pod's
// address already on the wire, ADD fails and gives back the lease and
// the child.
func TestIPv6DADFailureReleases(t *testing.T) {
	testenv.Privileged(t)
	n, conf, leases := ipamNode(t, true)
	netnstest.AddAddr(t, n.peer, hostDev+"p", "fd00:77::10/64")
	pod := netnstest.NewNS(t)
	wantCode(t, n.run(add, pod, conf, prevResult100), CodeLinkSetup, "duplicate")
	if leaseCount(t, leases) != 0 || len(stateFiles(t, n.dir)) != 0 {
		t.Error("failed ADD kept its lease or state")
	}
	if names := netnstest.Names(t, pod); len(names) != 1 {
		t.Errorf("pod keeps %v", names)
	}
}

// TestIPv6GCReleases checks that GC releases the lease of an attachment
// the runtime no longer lists even after its netns is gone.
func TestIPv6GCReleases(t *testing.T) {
	testenv.Privileged(t)
	n, conf, leases := ipamNode(t, false)
	pod := netnstest.NewNS(t)
	if err := n.run(add, pod, conf, prevResult100); err != nil {
		t.Fatal(err)
	}
	netnstest.Delete(pod)
	if err := n.run(gc, nil, conf+`,"cni.dev/valid-attachments":[]`, ""); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if leaseCount(t, leases) != 0 || len(stateFiles(t, n.dir)) != 0 {
		t.Error("GC kept the lease or the record")
	}
}

func assertIPv6Result(t *testing.T, out []byte, ver string) {
	t.Helper()
	var res struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct{ Name string }
		IPs        []struct{ Address string }
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	last := res.Interfaces[len(res.Interfaces)-1]
	if res.CNIVersion != ver || last.Name != "rdma0" || len(res.IPs) != 1 || res.IPs[0].Address != "10.1.0.5/24" {
		t.Errorf("result %s: want the primary's IP only and rdma0's entry", out)
	}
}

func assertRoute(t *testing.T, pod ns.NetNS, dst, gw string) {
	t.Helper()
	_ = pod.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("rdma0")
		if err != nil {
			t.Errorf("rdma0: %v", err)
			return nil
		}
		routes, _ := nldump.RouteList(nil, l, netlink.FAMILY_V6)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == dst && r.Gw.String() == gw {
				return nil
			}
		}
		t.Errorf("no route %s via %s dev rdma0 in %v", dst, gw, routes)
		return nil
	})
}

func assertSysctl(t *testing.T, pod ns.NetNS, key, want string) {
	t.Helper()
	_ = pod.Do(func(ns.NetNS) error {
		b, err := os.ReadFile("/proc/sys/" + key)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", key, b, err, want)
		}
		return nil
	})
}

// TestPodIPv6BlockRealIPAM runs podIPv6Block with the real host-local
// and real addresses on the node's netdev: two pods get the block's
// first addresses in ens9's /64, DEL releases them, and the block, once
// exhausted, is 109 naming it.
func TestPodIPv6BlockRealIPAM(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, rdma.ModeShared)
	n.cniPath = filepath.Dir(testenv.RequireBinary(t, "host-local", testenv.ToolsDir("cni", "bin")))
	n.w.devices = []rdma.Device{rxe("rxe0", hostDev)} // ens9 has fd00:1::10/64
	leases := t.TempDir()
	conf := `,"podSelection":"all","sharedLink":{"type":"macvlan"},"podIPv6Block":"::f:0:c00/126","ipam":{"type":"host-local","dataDir":"` + leases + `"}`
	var pods []ns.NetNS
	for i, want := range []string{"fd00:1::f:0:c02/126", "fd00:1::f:0:c03/126"} {
		pod := netnstest.NewNS(t)
		pods = append(pods, pod)
		if err := n.run(add, pod, conf, prevResult100); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if link, _ := netnstest.Snapshot(t, pod, "rdma0"); len(link.Addrs) != 1 || link.Addrs[0] != want {
			t.Errorf("pod %d rdma0 addrs %v, want %s", i, link.Addrs, want)
		}
	}
	// host-local keeps a range's first address (its default gateway) out: a
	// /126 holds ::c02 and ::c03 for pods.
	wantCode(t, n.run(add, netnstest.NewNS(t), conf, prevResult100), CodePodIPv6, "fd00:1::f:0:c00/126")
	for i, pod := range pods {
		if err := n.run(del, pod, conf, ""); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(leases, "rdmanet", "fd00:1::*"))
	if len(files) != 0 || len(stateFiles(t, n.dir)) != 0 {
		t.Errorf("leases %v, records %v left", files, stateFiles(t, n.dir))
	}
}
