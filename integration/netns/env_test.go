// Package netns is the privileged tier: the built plugin chained after the
// real upstream ptp + host-local, driven through libcni and cnitool, in a
// throwaway "node" netns per case so the machine's own netns is never touched.
package netns

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const netName = "rdmanet"

// node is one test's node: its netns, CNI folders, kubelet socket and chain.
type node struct {
	t        testing.TB
	ns       ns.NetNS
	dir      string
	binDir   string
	confDir  string
	dataDir  string
	socket   string
	cniVer   string
	cni      *libcni.CNIConfig
	list     *libcni.NetworkConfigList
	listJSON []byte
}

// newNode prepares a node netns and a chain [ptp+host-local, rdma-chain]
// whose rdma-chain entry gets the extra keys in rc.
func newNode(t testing.TB, cniVer string, rc map[string]any) *node {
	t.Helper()
	testenv.Privileged(t)
	root := testenv.RepoRoot()
	plugin := os.Getenv("RDMA_CHAIN_BIN")
	if plugin == "" {
		plugin = filepath.Join(root, "bin", "rdma-chain")
	}
	tools := testenv.ToolsDir("cni", "bin")
	n := &node{t: t, dir: t.TempDir(), cniVer: cniVer}
	n.binDir = filepath.Join(n.dir, "bin")
	n.confDir = filepath.Join(n.dir, "net.d")
	n.dataDir = filepath.Join(n.dir, "state")
	n.socket = filepath.Join(n.dir, "kubelet.sock")
	mkdirs(t, n.binDir, n.confDir)
	link(t, testenv.RequireBinary(t, "rdma-chain", filepath.Dir(plugin)), filepath.Join(n.binDir, "rdma-chain"))
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		link(t, testenv.RequireBinary(t, p, tools), filepath.Join(n.binDir, p))
	}
	var err error
	if n.ns, err = testutils.NewNS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnstest.Delete(n.ns) })
	n.writeList(rc)
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, filepath.Join(n.dir, "cache"), nil)
	return n
}

func (n *node) writeList(rc map[string]any) {
	entry := map[string]any{
		"type": "rdma-chain", "dataDir": n.dataDir, "podResourcesSocket": n.socket,
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
	}
	for k, v := range rc {
		entry[k] = v
	}
	list := map[string]any{
		"cniVersion": n.cniVer, "name": netName,
		"plugins": []any{n.ptpEntry(), entry},
	}
	var err error
	n.listJSON, _ = json.Marshal(list)
	if n.list, err = libcni.ConfListFromBytes(n.listJSON); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.confDir, "10-rdmanet.conflist"), n.listJSON, 0o600); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) ptpEntry() map[string]any {
	return map[string]any{
		"type": "ptp", "ipMasq": false,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": filepath.Join(n.dir, "ipam"),
			"ranges": [][]map[string]string{{{"subnet": "10.77.0.0/24"}}},
		},
	}
}

// kubelet serves pod-resources on the node's socket until the test ends.
func (n *node) kubelet(pods ...fakekubelet.Pod) {
	s, err := fakekubelet.Start(n.socket, pods)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(s.Stop)
}

// pod is one sandbox: its netns and runtime conf.
type pod struct {
	ns ns.NetNS
	rt *libcni.RuntimeConf
}

func (n *node) pod(name string) *pod {
	n.t.Helper()
	pns, err := testutils.NewNS()
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { netnstest.Delete(pns) })
	return &pod{ns: pns, rt: &libcni.RuntimeConf{
		ContainerID: "ctr-" + name, NetNS: pns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"network.alibabacloud.com/erdma-smcr": "false",
		}},
	}}
}

// inNode runs fn with the calling thread in the node netns, so the plugins
// libcni executes see the node netns as their host.
func (n *node) inNode(fn func() error) error {
	return n.ns.Do(func(ns.NetNS) error { return fn() })
}

func (n *node) add(p *pod) (types.Result, error) {
	var r types.Result
	err := n.inNode(func() (err error) {
		r, err = n.cni.AddNetworkList(context.Background(), n.list, p.rt)
		return err
	})
	return r, err
}

func (n *node) check(p *pod) error {
	return n.inNode(func() error { return n.cni.CheckNetworkList(context.Background(), n.list, p.rt) })
}

func (n *node) del(p *pod) error {
	return n.inNode(func() error { return n.cni.DelNetworkList(context.Background(), n.list, p.rt) })
}

func (n *node) gc(valid ...*pod) error {
	args := &libcni.GCArgs{}
	for _, p := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: p.rt.ContainerID, IfName: p.rt.IfName})
	}
	return n.inNode(func() error { return n.cni.GCNetworkList(context.Background(), n.list, args) })
}

func (n *node) status() error {
	return n.inNode(func() error { return n.cni.GetStatusNetworkList(context.Background(), n.list) })
}

func (n *node) stateFiles() []string {
	files, _ := filepath.Glob(filepath.Join(n.dataDir, "attachments", "*.json"))
	return files
}

func mkdirs(t testing.TB, dirs ...string) {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func link(t testing.TB, from, to string) {
	if err := os.Symlink(from, to); err != nil {
		t.Fatal(err)
	}
}

func confList(b []byte) (*libcni.NetworkConfigList, error) { return libcni.ConfListFromBytes(b) }
