package netns

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// netdevNode is a node netns whose veth ens9 stands in for the netdev of
// RDMA device mlx5_0, and a pod.
type netdevNode struct {
	*benchPod
	b               *testing.B
	node            ns.NetNS
	fakeDir, cniDir string
}

func newNetdevNode(b *testing.B, mode string) *netdevNode {
	b.Helper()
	n := &netdevNode{benchPod: newBenchPod(b), b: b, node: netnstest.NewNS(b)}
	netnstest.AddVeth(b, n.node, netnstest.NewNS(b), "ens9", 1500)
	n.fakeDir = filepath.Join(n.dir, "fake-rdma")
	mkdirs(b, n.fakeDir)
	writeJSONFile(b, filepath.Join(n.fakeDir, "config.json"), map[string]any{"mode": mode,
		"devices": []any{map[string]string{"name": "mlx5_0", "netdev": "ens9"}}})
	n.cniDir = testenv.ToolsDir("cni", "bin")
	return n
}

// cycle runs ADD then DEL of bin with conf, in the node netns.
func (n *netdevNode) cycle(bin, ifname string, conf map[string]any) func() (sample, error) {
	conf["cniVersion"], conf["name"] = "1.1.0", "bench"
	raw, _ := json.Marshal(conf)
	env := []string{"CNI_CONTAINERID=bench", "CNI_NETNS=" + n.pod.Path(), "CNI_IFNAME=" + ifname,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web", "CNI_PATH=" + n.cniDir,
		"RDMA_CHAIN_FAKE_RDMA=" + n.fakeDir}
	return func() (s sample, err error) {
		cpu0 := childrenCPU()
		err = n.node.Do(func(ns.NetNS) error {
			var add, del sample
			before := len(netnstest.Names(n.b, n.pod))
			if add, err = runProc(cniCmd(bin, "ADD", raw, env...)); err != nil {
				return err
			}
			if after := len(netnstest.Names(n.b, n.pod)); after != before+1 {
				return fmt.Errorf("%s ADD left %d links in the pod, want %d", bin, after, before+1)
			}
			del, err = runProc(cniCmd(bin, "DEL", raw, env...))
			s.wall = add.wall + del.wall
			return err
		})
		s.cpu = childrenCPU() - cpu0
		return s, err
	}
}

// BenchmarkNetdevModes measures exclusive mode's move of the RDMA netdev
// into the pod and back, against upstream host-device moving the same
// veth; then shared mode's child with IPv6 from host-local, against
// upstream macvlan with the same IPAM.
func BenchmarkNetdevModes(b *testing.B) {
	testenv.Privileged(b)
	fake := fakeRDMAPlugin(b)
	n := benchSamples(60) / 2
	for range b.N {
		ex := newNetdevNode(b, "exclusive")
		rc := ex.cycle(fake, "eth0", map[string]any{"type": "rdma-chain", "podSelection": "all",
			"dataDir": filepath.Join(ex.dir, "state"), "podResourcesSocket": ex.socket, "prevResult": ex.prev})
		hd := ex.cycle(upstream(b, "host-device"), "net1", map[string]any{"type": "host-device", "device": "ens9"})
		rcS, hdS := paired(b, n, rc, hd)
		report(b, row{measure: "exclusive move ADD+DEL CPU, rdma-chain (fake RDMA)", unit: "ms", v: ms(rcS, cpuMS),
			baseName: "host-device", base: ms(hdS, cpuMS), maxRatio: 1.0, target: "<= 1.0x", remark: "veth stand-in"})
		report(b, row{measure: "exclusive move ADD+DEL wall, rdma-chain (fake RDMA)", unit: "ms", v: ms(rcS, wallMS),
			baseName: "host-device", base: ms(hdS, wallMS), maxRatio: 1.0, target: "<= 1.0x"})

		sh := newNetdevNode(b, "shared")
		ipam := func(subnet, dir string) map[string]any {
			return map[string]any{"type": "host-local", "dataDir": filepath.Join(sh.dir, dir),
				"ranges": [][]map[string]string{{{"subnet": subnet}}}}
		}
		rc = sh.cycle(fake, "eth0", map[string]any{"type": "rdma-chain", "podSelection": "all",
			"dataDir": filepath.Join(sh.dir, "state"), "podResourcesSocket": sh.socket, "prevResult": sh.prev,
			"sharedLink": map[string]string{"type": "macvlan"}, "ipam": ipam("fd00:77::/64", "ipam-rc")})
		mv := sh.cycle(upstream(b, "macvlan"), "net1", map[string]any{"type": "macvlan", "master": "ens9",
			"mode": "bridge", "ipam": ipam("fd00:78::/64", "ipam-mv")})
		rcS, mvS := paired(b, n, rc, mv)
		report(b, row{measure: "shared macvlan child + IPv6 ADD+DEL CPU, rdma-chain (fake RDMA)", unit: "ms",
			v: ms(rcS, cpuMS), baseName: "macvlan", base: ms(mvS, cpuMS), maxRatio: 1.0, target: "<= 1.0x",
			remark: "host-local IPv6 both"})
		report(b, row{measure: "shared macvlan child + IPv6 ADD+DEL wall, rdma-chain (fake RDMA)", unit: "ms",
			v: ms(rcS, wallMS), baseName: "macvlan", base: ms(mvS, wallMS), maxRatio: 1.0, target: "<= 1.0x"})
	}
}

func writeJSONFile(b *testing.B, path string, v any) {
	b.Helper()
	raw, _ := json.Marshal(v)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		b.Fatal(err)
	}
}
