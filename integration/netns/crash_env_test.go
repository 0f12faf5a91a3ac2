package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// crashNode is a node netns whose veth ens9 stands in for the netdev of the
// RDMA device mlx5_0 of the fake RDMA subsystem; the chain is
// [ptp + host-local, rdma-chain built with failpoints].
type crashNode struct {
	t                    *testing.T
	dir, binDir, dataDir string
	ipamDir, fakeDir     string
	node, peer           ns.NetNS
	cni                  *libcni.CNIConfig
	full, primary        *libcni.NetworkConfigList
	entry                map[string]any
}

const crashCNIVersion = "1.1.0"

func newCrashNode(t *testing.T, bin string, sc crashScenario) *crashNode {
	t.Helper()
	n := &crashNode{t: t, dir: t.TempDir()}
	n.binDir = filepath.Join(n.dir, "bin")
	n.dataDir = filepath.Join(n.dir, "state")
	n.ipamDir = filepath.Join(n.dir, "ipam")
	n.fakeDir = filepath.Join(n.dir, "fake-rdma")
	mkdirs(t, n.binDir, n.fakeDir)
	link(t, bin, filepath.Join(n.binDir, "rdma-chain"))
	tools := testenv.ToolsDir("cni", "bin")
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		link(t, testenv.RequireBinary(t, p, tools), filepath.Join(n.binDir, p))
	}
	n.node, n.peer = netnstest.NewNS(t), netnstest.NewNS(t)
	netnstest.AddVeth(t, n.node, n.peer, "ens9", 1400, "192.0.2.10/24", "fd00:1::10/64")
	netnstest.AddRoute(t, n.node, "ens9", "198.51.100.0/24", "192.0.2.1", 0, 0)
	netnstest.AddRoute(t, n.node, "ens9", "0.0.0.0/0", "192.0.2.1", 100, 0)
	netnstest.AddRoute(t, n.node, "ens9", "fd00:99::/64", "fd00:1::1", 0, 50)
	fake := map[string]any{"mode": sc.mode, "devices": []any{map[string]string{"name": "mlx5_0", "netdev": "ens9", "pci": "0000:3b:00.0"}}}
	writeJSON(t, filepath.Join(n.fakeDir, "config.json"), fake)
	t.Setenv("RDMA_CHAIN_FAKE_RDMA", n.fakeDir)
	n.entry = map[string]any{"type": "rdma-chain", "dataDir": n.dataDir, "podSelection": "all",
		"podResourcesSocket": filepath.Join(n.dir, "kubelet.sock")}
	for k, v := range sc.entry {
		n.entry[k] = v
	}
	if sc.devinfo {
		// The plugin creates the folders, as the spec asks.
		n.entry["runtimeConfig"] = map[string]any{"CNIDeviceInfoFile": filepath.Join(n.dir, "devinfo", "cni", "dev.json")}
	}
	if sc.ipam {
		n.entry["ipam"] = map[string]any{"type": "host-local", "dataDir": filepath.Join(n.ipamDir, "rdma"),
			"ranges": [][]map[string]string{{{"subnet": "fd00:77::/64"}}}, "routes": []map[string]string{{"dst": "fd00:88::/64"}}}
	}
	ptp := map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{"type": "host-local",
		"dataDir": filepath.Join(n.ipamDir, "primary"), "ranges": [][]map[string]string{{{"subnet": "10.77.0.0/24"}}}}}
	n.primary = confListOf(t, ptp)
	n.full = confListOf(t, ptp, n.entry)
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.binDir}, filepath.Join(n.dir, "cache"), nil)
	return n
}

func confListOf(t *testing.T, plugins ...any) *libcni.NetworkConfigList {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"cniVersion": crashCNIVersion, "name": netName, "plugins": plugins})
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// crashPod is one sandbox of a crash run.
type crashPod struct {
	ns ns.NetNS
	rt *libcni.RuntimeConf
}

func (n *crashNode) newPod(name string) *crashPod {
	pns := netnstest.NewNS(n.t)
	// The kernel flushes a netns' pnet table with the netns: so does the
	// fake's, or a later netns reusing the inode would inherit it.
	var st unix.Stat_t
	if err := unix.Stat(pns.Path(), &st); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = os.Remove(filepath.Join(n.fakeDir, "pnet", fmt.Sprintf("%d.json", st.Ino))) })
	return &crashPod{ns: pns, rt: &libcni.RuntimeConf{ContainerID: "ctr-" + name, NetNS: pns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}}}
}

func (n *crashNode) inNode(fn func() error) error {
	return n.node.Do(func(ns.NetNS) error { return fn() })
}

// primaryAdd runs ptp + host-local for p, as the runtime's chain would
// before rdma-chain, and returns its result.
func (n *crashNode) primaryAdd(p *crashPod) []byte {
	n.t.Helper()
	var res types.Result
	err := n.inNode(func() (err error) {
		res, err = n.cni.AddNetworkList(context.Background(), n.primary, p.rt)
		return err
	})
	if err != nil {
		n.t.Fatalf("ptp ADD: %v", err)
	}
	b, _ := json.Marshal(res)
	return b
}

func (n *crashNode) fullDel(p *crashPod) error {
	return n.inNode(func() error { return n.cni.DelNetworkList(context.Background(), n.full, p.rt) })
}

func (n *crashNode) primaryDel(p *crashPod) error {
	return n.inNode(func() error { return n.cni.DelNetworkList(context.Background(), n.primary, p.rt) })
}

// pluginRun is one execution of the rdma-chain binary.
type pluginRun struct {
	stdout, stderr string
	err            error
	killed         bool // died of SIGKILL
	took           time.Duration
}

// execPlugin runs rdma-chain's verb for p in the node netns, with prev as
// prevResult (ADD) and the extra environment (failpoint, trace).
func (n *crashNode) execPlugin(verb string, p *crashPod, prev []byte, extraEnv ...string) pluginRun {
	var extra map[string]any
	if verb == "GC" {
		extra = map[string]any{"cni.dev/valid-attachments": []any{}}
	}
	return n.execPluginConf(verb, p, prev, extra, extraEnv...)
}

// execPluginConf is execPlugin with extra keys in the conf.
func (n *crashNode) execPluginConf(verb string, p *crashPod, prev []byte, extra map[string]any, extraEnv ...string) pluginRun {
	conf := map[string]any{"cniVersion": crashCNIVersion, "name": netName}
	for k, v := range n.entry {
		conf[k] = v
	}
	for k, v := range extra {
		conf[k] = v
	}
	if prev != nil {
		conf["prevResult"] = json.RawMessage(prev)
	}
	stdin, _ := json.Marshal(conf)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.binDir, "rdma-chain"))
	cmd.Env = append([]string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + p.rt.ContainerID, "CNI_NETNS=" + p.rt.NetNS,
		"CNI_IFNAME=eth0", "CNI_PATH=" + n.binDir, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
		"RDMA_CHAIN_FAKE_RDMA=" + n.fakeDir}, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	start := time.Now()
	r := pluginRun{err: n.inNode(cmd.Run)}
	r.took = time.Since(start)
	r.stdout, r.stderr = stdout.String(), stderr.String()
	if cmd.ProcessState != nil {
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		r.killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	return r
}

func (r pluginRun) String() string {
	return fmt.Sprintf("err %v killed %v\nstdout %s\nstderr %s", r.err, r.killed, r.stdout, r.stderr)
}
