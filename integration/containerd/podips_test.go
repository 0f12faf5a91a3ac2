//go:build containerd

package containerd

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const ipsPod = "rdma-ips"

// TestContainerdPodIPs checks that a pod that really gets rdma0 with an IPv6
// address (the fake-RDMA build: only the RDMA subsystem is a model, a veth
// in containerd's netns stands in for mlx5_0's netdev; shared mode, a
// macvlan child, host-local fd00:77::/64) has containerd's CRI pod IPs from
// eth0 only: with the default result, which lists no rdma0 address, and with
// reportIPs, which does (go-cni groups the result's IPs by interface and CRI
// reports CNI_IFNAME's). containerd 1.6 runs no 1.1.0 chain
// (TestContainerd).
func TestContainerdPodIPs(t *testing.T) {
	testenv.RequireRoot(t)
	plugin := filepath.Join(t.TempDir(), "rdma-chain")
	testenv.Build(t, plugin, "./integration/netns/crash_plugin", "")
	for _, rt := range runtimes() {
		for _, version := range []string{"0.4.0", "1.1.0"} {
			if rt.major == 1 && version == "1.1.0" {
				continue
			}
			for _, report := range []bool{false, true} {
				// Short names: containerd's sockets live under t.TempDir(),
				// and a unix socket path has at most 104 bytes.
				name := rt.name + "/" + version + "/default"
				if report {
					name = rt.name + "/" + version + "/report"
				}
				t.Run(name, func(t *testing.T) { runPodIPs(t, rt, version, plugin, report) })
			}
		}
	}
}

func runPodIPs(t *testing.T, rt runtimeKind, version, plugin string, report bool) {
	fake, rdmaIPAM := t.TempDir(), t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"mode": "shared",
		"devices": []any{map[string]string{"name": "mlx5_0", "netdev": "ens9", "pci": "0000:3b:00.0"}}})
	if err := os.WriteFile(filepath.Join(fake, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	pods := []fakekubelet.Pod{{Namespace: podNamespace, Name: ipsPod, Resources: map[string][]string{"rdma/hca": {"mlx5_0"}}}}
	e := newEnvWith(t, rt, version, pods, envOptions{plugin: plugin, daemonEnv: []string{"RDMA_CHAIN_FAKE_RDMA=" + fake},
		rdmaKeys: map[string]any{"sharedLink": map[string]string{"type": "macvlan"}, "reportIPs": report,
			"ipam": map[string]any{"type": "host-local", "dataDir": rdmaIPAM,
				"ranges": [][]map[string]string{{{"subnet": "fd00:77::/64"}}}}}})
	netnstest.AddVeth(t, e.netns, netnstest.NewNS(t), "ens9", 1500)
	id, err := e.cri.run(callCtx(t), e.pod(ipsPod, nil))
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, e.d.tail())
	}
	st, err := e.cri.status(callCtx(t), id)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	ips := []string{st.GetNetwork().GetIp()}
	for _, a := range st.GetNetwork().GetAdditionalIps() {
		ips = append(ips, a.GetIp())
	}
	_, subnet, _ := net.ParseCIDR("10.66.0.0/24")
	for _, ip := range ips {
		if p := net.ParseIP(ip); p == nil || !subnet.Contains(p) {
			t.Errorf("CRI pod IPs %v, want eth0's from ptp's 10.66.0.0/24 only", ips)
		}
	}
	if got := rdma0Addrs(t, e); len(got) != 1 || !strings.HasPrefix(got[0], "fd00:77::") {
		t.Errorf("rdma0 in the pod holds %v, want one address from fd00:77::/64", got)
	}
	t.Logf("CRI pod IPs %v; rdma0 %v (reportIPs=%v)", ips, rdma0Addrs(t, e), report)
	if err := e.cri.stop(callCtx(t), id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := e.cri.remove(callCtx(t), id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	expectNoRecord(t, e)
	expectNoLease(t, e, id)
	if left, _ := filepath.Glob(filepath.Join(rdmaIPAM, netName, "fd00*")); len(left) != 0 {
		t.Errorf("rdma0's leases left: %v", left)
	}
}

// rdma0Addrs reads rdma0's global addresses in the one running sandbox.
func rdma0Addrs(t *testing.T, e *env) []string {
	t.Helper()
	paths := e.podNetns(t)
	if len(paths) != 1 {
		t.Fatalf("pod netns %v, want one", paths)
	}
	pns, err := ns.GetNS(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer pns.Close()
	return netnstest.GlobalV6(t, pns, "rdma0")
}
