package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/followers"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
)

// resultNode is a node netns whose veth ens9 stands in for the netdev of
// RDMA device mlx5_0 (PCI 0000:3b:00.0) of the fake RDMA subsystem, with a
// CNI bin dir holding the fake-RDMA rdma-chain build, the reference plugins
// and follower_plugin, which records what a plugin after rdma-chain gets.
type resultNode struct {
	t                                   *testing.T
	dir, binDir, confDir, fakeDir, seen string
	node                                ns.NetNS
}

const stand = "0000:3b:00.0"

func newResultNode(t *testing.T, mode string) *resultNode {
	t.Helper()
	testenv.Privileged(t)
	n := &resultNode{t: t, dir: t.TempDir()}
	n.binDir, n.confDir = filepath.Join(n.dir, "bin"), filepath.Join(n.dir, "net.d")
	n.fakeDir, n.seen = filepath.Join(n.dir, "fake-rdma"), filepath.Join(n.dir, "follower")
	mkdirs(t, n.binDir, n.confDir, n.fakeDir, n.seen)
	link(t, fakeRDMAPlugin(t), filepath.Join(n.binDir, "rdma-chain"))
	link(t, testBuild(t, "./integration/netns/follower_plugin", ""), filepath.Join(n.binDir, "follower"))
	tools := testenv.ToolsDir("cni", "bin")
	for _, p := range []string{"ptp", "bridge", "host-local", "loopback"} {
		link(t, testenv.RequireBinary(t, p, tools), filepath.Join(n.binDir, p))
	}
	n.node = netnstest.NewNS(t)
	netnstest.AddVeth(t, n.node, netnstest.NewNS(t), "ens9", 1400, "fd00:77::fffe/64")
	writeJSON(t, filepath.Join(n.fakeDir, "config.json"), map[string]any{"mode": mode,
		"devices": []any{map[string]string{"name": "mlx5_0", "netdev": "ens9", "pci": stand}}})
	return n
}

// primaryEntry is ptp or bridge with host-local, as the first plugin.
func (n *resultNode) primaryEntry(kind string) map[string]any {
	e := map[string]any{"type": kind, "ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.dir, "ipam"),
		"ranges": [][]map[string]string{{{"subnet": "10.77.0.0/24", "gateway": "10.77.0.1"}}},
		"routes": []map[string]string{{"dst": "0.0.0.0/0"}}}}
	if kind == "bridge" {
		e["bridge"], e["isGateway"] = "cni-rc0", true
	}
	return e
}

// rdmaEntry is rdma-chain for every pod, with IPv6 from host-local on rdma0.
func (n *resultNode) rdmaEntry(mode string, extra map[string]any) map[string]any {
	e := map[string]any{"type": "rdma-chain", "podSelection": "all", "dataDir": filepath.Join(n.dir, "state"),
		"podResourcesSocket": filepath.Join(n.dir, "kubelet.sock"), "logFile": filepath.Join(n.dir, "rdma-chain.log"),
		"capabilities": map[string]bool{"CNIDeviceInfoFile": true},
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.dir, "ipam-rdma"),
			"ranges": [][]map[string]string{{{"subnet": "fd00:77::/64", "rangeStart": "fd00:77::10", "rangeEnd": "fd00:77::20"}}},
			"routes": []map[string]string{{"dst": "fd00:88::/64"}}}}
	if mode == "shared" {
		e["sharedLink"] = map[string]string{"type": "macvlan"}
	}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

// writeList writes the conflist cnitool loads: the plugins as given, without
// their own cniVersion and name (as terway-cli writes Terway's).
func (n *resultNode) writeList(name, ver string, plugins ...map[string]any) {
	n.t.Helper()
	list := map[string]any{"cniVersion": ver, "name": name, "plugins": plugins}
	writeJSON(n.t, filepath.Join(n.confDir, "10-"+name+".conflist"), list)
}

// cnitool runs the real cnitool in the node netns for the pod.
func (n *resultNode) cnitool(name, verb string, pod ns.NetNS, capArgs string) (string, error) {
	n.t.Helper()
	tool := testenv.RequireBinary(n.t, "cnitool", testenv.ToolsDir("bin"))
	cmd := exec.Command("ip", "netns", "exec", filepath.Base(n.node.Path()), tool, verb, name, pod.Path())
	cmd.Env = append(os.Environ(), "NETCONFPATH="+n.confDir, "CNI_PATH="+n.binDir,
		"CNI_CACHE_DIR="+filepath.Join(n.dir, "cache"), "CNI_CONTAINERID=ctr-"+filepath.Base(pod.Path()),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=uid-web",
		"CAP_ARGS="+capArgs, "RDMA_CHAIN_FAKE_RDMA="+n.fakeDir, "RDMA_CHAIN_FOLLOWER_DIR="+n.seen)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// add runs cnitool add and returns the printed result, raw and decoded.
func (n *resultNode) add(name string, pod ns.NetNS, capArgs string) ([]byte, *types100.Result) {
	n.t.Helper()
	out, err := n.cnitool(name, "add", pod, capArgs)
	if err != nil {
		n.t.Fatalf("cnitool add: %v\n%s\n%s", err, out, n.log())
	}
	raw := []byte(out)
	r, err := resultFrom(raw)
	if err != nil {
		n.t.Fatalf("cnitool add printed %s: %v", out, err)
	}
	return raw, r
}

// resultFrom decodes a result of any version and converts it to 1.1.0, as
// Multus and go-cni do before reading it.
func resultFrom(raw []byte) (*types100.Result, error) {
	res, err := create.CreateFromBytes(raw)
	if err != nil {
		return nil, err
	}
	return types100.NewResultFromResult(res)
}

func (n *resultNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "rdma-chain.log"))
	return string(b)
}

// followerGot returns the prevResult the follower received with verb.
func (n *resultNode) followerGot(verb string) json.RawMessage {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.seen, verb+".json"))
	if err != nil {
		n.t.Fatalf("the follower never received %s: %v", verb, err)
	}
	var conf struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		n.t.Fatal(err)
	}
	return conf.PrevResult
}

// TestResultFollowersAndCheck runs [primary + host-local, rdma-chain with
// ipam, follower] through cnitool: the result is the primary's plus rdma0's
// interface entry, which the follower receives as is on ADD and on CHECK;
// CRI-O's and Multus's rules read eth0's address only and eth0 as default;
// CHECK passes in the primary (ptp, bridge), in rdma-chain and in the
// follower; rdma0 holds its address in the pod all the same, and the
// device-info file the runtime asked for is there until DEL. With reportIPs
// the result lists rdma0's address and the primary's CHECK fails on it, as
// its code says it must.
func TestResultFollowersAndCheck(t *testing.T) {
	testenv.Privileged(t)
	for _, primary := range []string{"ptp", "bridge"} {
		for _, mode := range []string{"shared", "exclusive"} {
			for _, ver := range []string{"0.4.0", "1.0.0", "1.1.0"} {
				for _, report := range []bool{false, true} {
					if report && primary == "bridge" {
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/%s/reportIPs=%v", primary, mode, ver, report), func(t *testing.T) {
						runResultCase(t, primary, mode, ver, report)
					})
				}
			}
		}
	}
}

func runResultCase(t *testing.T, primary, mode, ver string, report bool) {
	n := newResultNode(t, mode)
	n.writeList(netName, ver, n.primaryEntry(primary), n.rdmaEntry(mode, map[string]any{"reportIPs": report}),
		map[string]any{"type": "follower"})
	pod := netnstest.NewNS(t)
	devInfo := filepath.Join(n.dir, "devinfo", "cni", "rdmanet-eth0.json")
	capArgs := fmt.Sprintf(`{"CNIDeviceInfoFile":%q}`, devInfo)
	raw, r := n.add(netName, pod, capArgs)
	t.Logf("final result (%s, %s, %s, reportIPs=%v): %s", primary, mode, ver, report, raw)
	assertRDMAEntry(t, r, pod.Path(), ver)
	wantIPs := []string{r.IPs[0].Address.IP.String()}
	if report {
		wantIPs = append(wantIPs, "fd00:77::10")
	}
	if got := followers.CRIOPodIPs(r); !reflect.DeepEqual(got, wantIPs) {
		t.Errorf("CRI-O's pod IPs %v, want %v", got, wantIPs)
	}
	assertMultusDefault(t, r, report)
	assertJSONEqual(t, n.followerGot("ADD"), raw)
	if b, err := os.ReadFile(devInfo); err != nil || string(b) != string(devinfo.Content(stand, "mlx5_0")) {
		t.Errorf("device-info file %s: %q, %v", devInfo, b, err)
	}
	if got := netnstest.GlobalV6(t, pod, "rdma0"); !reflect.DeepEqual(got, []string{"fd00:77::10/64"}) {
		t.Errorf("rdma0's addresses in the pod %v, want fd00:77::10/64", got)
	}
	out, err := n.cnitool(netName, "check", pod, capArgs)
	if report {
		if err == nil || !strings.Contains(out, "Failed to match addr fd00:77::10/64 on interface eth0") {
			t.Errorf("CHECK with reportIPs: %v\n%s; want %s's failure on rdma0's address", err, out, primary)
		}
	} else {
		if err != nil {
			t.Fatalf("cnitool check: %v\n%s\n%s", err, out, n.log())
		}
		assertJSONEqual(t, n.followerGot("CHECK"), raw)
	}
	for i := range 2 {
		if out, err := n.cnitool(netName, "del", pod, capArgs); err != nil {
			t.Fatalf("cnitool del %d: %v\n%s", i, err, out)
		}
	}
	if _, err := os.Lstat(devInfo); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device-info file after DEL: %v", err)
	}
	if names := netnstest.Names(t, n.node); !slices.Contains(names, "ens9") {
		t.Errorf("node links after DEL %v: ens9 not back", names)
	}
}

// assertRDMAEntry checks that rdma0 follows the primary's entries, in the
// pod's sandbox, with its MAC, and at 1.1.0 its MTU and the device's PCI
// address.
func assertRDMAEntry(t *testing.T, r *types100.Result, sandbox, ver string) {
	t.Helper()
	last := r.Interfaces[len(r.Interfaces)-1]
	wantMTU, wantPCI := 1400, stand
	if ver != "1.1.0" {
		wantMTU, wantPCI = 0, ""
	}
	if last.Name != "rdma0" || last.Sandbox != sandbox || last.Mac == "" || last.Mtu != wantMTU || last.PciID != wantPCI {
		t.Errorf("rdma0's entry %+v, want sandbox %s mtu %d pciID %q", last, sandbox, wantMTU, wantPCI)
	}
	for _, iface := range r.Interfaces[:len(r.Interfaces)-1] {
		if strings.HasPrefix(iface.Name, "rdma") {
			t.Errorf("two RDMA entries: %+v", r.Interfaces)
		}
	}
}

// assertMultusDefault checks that Multus's network-status makes eth0 the
// default with the primary's address; rdma0 is never the default and shows
// an address only with reportIPs.
func assertMultusDefault(t *testing.T, r *types100.Result, report bool) {
	t.Helper()
	st := followers.MultusStatuses(r, true)
	if len(st) != 2 || st[0].Interface != "eth0" || !st[0].Default || len(st[0].IPs) != 1 ||
		st[1].Interface != "rdma0" || st[1].Default || (len(st[1].IPs) == 1) != report {
		t.Errorf("Multus network-status %+v", st)
	}
}
