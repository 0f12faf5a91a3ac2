//go:build cluster

// Package cluster is the cluster tier: a real control plane on the host's
// loopback (etcd v3.7.3, kube-apiserver, kube-controller-manager and
// kube-scheduler v1.37.2, built from the Go module proxy by
// scripts/cluster/parts.sh), with certificates, static tokens and
// kubeconfigs made fresh by this harness, checked through kubectl as an
// operator would.
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

func TestCluster(t *testing.T) {
	testenv.RequireRoot(t)
	parts := readParts(t)
	for _, k := range []string{"ETCD", "KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "KUBE_SCHEDULER"} {
		out, err := exec.Command(parts[k], "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v: %s", parts[k], err, out)
		}
		t.Logf("CLUSTER-VERSION %s: %s (build %s)", k, strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; "), parts[k+"_BUILD"])
	}
	out, err := exec.Command(parts["KUBECTL"], "version", "--client").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl version: %v: %s", err, out)
	}
	t.Logf("CLUSTER-VERSION KUBECTL: %s (build %s)", strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; "), parts["KUBECTL_BUILD"])
	// The node parts (the guests run these binaries).
	for _, v := range [][]string{
		{parts["CONTAINERD_DIR"] + "/containerd", "--version"},
		{parts["RUNC"], "--version"},
		{parts["KUBELET"], "--version"},
	} {
		out, err := exec.Command(v[0], v[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", v[0], err, out)
		}
		t.Logf("CLUSTER-VERSION %s: %s", filepath.Base(v[0]), strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0])
	}
	t.Logf("CLUSTER-VERSION k8s-rdma-shared-dp: %s", parts["RDMA_DP_VERSION"])

	cp := startControlPlane(t, parts)
	sum := &scenarioTimes{}
	// Last of t's cleanups: the one line that says where the tier's time
	// went, also when a scenario failed.
	t.Cleanup(func() { t.Logf("CLUSTER-SUMMARY %s; %s", sum, &cp.runs) })
	if !sum.run(t, "control-plane", func(t *testing.T) { testControlPlane(t, cp) }) {
		return
	}
	var vms []*nodeVM
	if !sum.run(t, "nodes-join", func(st *testing.T) { vms = testNodesJoin(st, t, cp) }) {
		return
	}
	startNodeShells(t, cp)
	if !sum.run(t, "deploy", func(t *testing.T) { testDeploy(t, cp) }) {
		return
	}
	if dir, user := workloadsDir(testenv.RepoRoot()); user {
		// make test-cluster PODS=DIR: anyone's manifests on the deployed
		// cluster, instead of the tier's own scenarios.
		t.Logf("PODS=%s: running these manifests, not the tier's scenarios", dir)
		sum.run(t, "workloads", func(t *testing.T) { testWorkloads(t, cp, dir) })
		holdForDebugging(t, cp)
		return
	}
	sum.run(t, "primary-rewrite", func(t *testing.T) { testPrimaryRewrite(t, cp) })
	sum.run(t, "admission", func(t *testing.T) { testAdmission(t, cp) })
	var hosts pair
	if !sum.run(t, "host-network", func(st *testing.T) { hosts = testHostNetwork(st, t, cp) }) {
		return
	}
	sum.run(t, "cross-node", func(t *testing.T) {
		if hosts.pods == nil {
			t.Fatal("cross-node compares with host-network's pods: run both")
		}
		p := testCrossNode(t, cp, hosts)
		sum.run(t, "daemonset-rollout", func(t *testing.T) { testRollout(t, cp, p) })
	})
	sum.run(t, "dra", func(t *testing.T) { testDRA(t, cp) })
	sum.run(t, "workloads", func(t *testing.T) {
		dir, _ := workloadsDir(testenv.RepoRoot())
		// node-b without its device plugin: there the seed workloads'
		// rdma/hca comes from the driver's DeviceClass for it (KEP-5004),
		// on node-a from the device plugin, in one run.
		stopDevicePlugin(t, cp, twoRootNode)
		testWorkloads(t, cp, dir)
	})
	// Each node's scenarios beside the other's: each guest has its core.
	// node-a's last is its loss, whose pods move to node-b once node-b's
	// scenarios are done.
	nodeBFree := make(chan struct{})
	lost, top := vms[slices.IndexFunc(vms, func(vm *nodeVM) bool { return vm.name == diskNode })], t
	sum.run(t, "per-node", func(t *testing.T) {
		sum.run(t, "node-a", func(t *testing.T) {
			t.Parallel()
			sum.run(t, "smcr-orphan", func(t *testing.T) { testOrphanedSMCR(t, cp) })
			sum.run(t, "dra-capacity", func(t *testing.T) { testDRACapacity(t, cp) })
			sum.run(t, "dra-smcr-class", func(t *testing.T) { testDRASMCRClass(t, cp) })
			sum.run(t, "same-node", func(t *testing.T) { testSameNode(t, cp) })
			sum.run(t, "reboot", func(t *testing.T) { testReboot(t, top, cp, lost) })
			sum.run(t, "node-loss", func(st *testing.T) { testNodeLoss(st, top, cp, lost, nodeNames[1], nodeBFree) })
		})
		sum.run(t, "node-b", func(t *testing.T) {
			t.Parallel()
			defer close(nodeBFree)
			sum.run(t, "dra-attach-failed", func(t *testing.T) { testDRAAttachFailed(t, cp) })
			sum.run(t, "dra-events", func(t *testing.T) { testDRAEvents(t, cp) })
			sum.run(t, "dra-only", func(t *testing.T) { testDRAOnly(t, cp) })
			sum.run(t, "dra-gpu-nic", func(t *testing.T) { testGPUNIC(t, cp) })
			sum.run(t, "dra-config", func(t *testing.T) { testDRAConfig(t, cp) })
			if extraScenario(t, "burst") {
				sum.run(t, "burst", func(t *testing.T) { testBurst(t, cp, sum) })
			}
		})
	})
	sum.run(t, "plugin-share", func(t *testing.T) { testPluginShare(t, cp) })
	sum.run(t, "containerd-restart", func(t *testing.T) { testContainerdRestart(t, cp) })
	holdForDebugging(t, cp)
	sum.run(t, "uninstall", func(t *testing.T) { testUninstall(t, cp) })
	if extraScenario(t, "burst-control") {
		sum.run(t, "burst-control", func(t *testing.T) { testBurstControl(t, cp) })
	}
	// Last: node-a leaves 6.12, the SMC-R scenarios' kernel, for 7.3.
	sum.run(t, "soft-roce", func(t *testing.T) { testSoftRoCE(t, top, cp, lost) })
}

// extraScenarios are scenarios written but not yet part of make test:
// they run only when RC_CLUSTER_EXTRA (comma-separated) names them, and
// the tier says so when it does not.
var extraScenarios = []string{"burst", "burst-control"}

// extraScenario reports whether RC_CLUSTER_EXTRA names the extra scenario
// name, and logs that it is left out when not.
func extraScenario(t *testing.T, name string) bool {
	if !slices.Contains(extraScenarios, name) {
		t.Fatalf("%s is not an extra scenario", name)
	}
	if slices.Contains(strings.Split(os.Getenv("RC_CLUSTER_EXTRA"), ","), name) {
		return true
	}
	t.Logf("CLUSTER-EXTRA %s not run: not yet part of make test (RC_CLUSTER_EXTRA=%s runs it)", name, name)
	return false
}

// setUp are the scenarios every run needs, and the groups that hold
// others: RC_CLUSTER_SCENARIOS never leaves them out.
var setUp = []string{"control-plane", "nodes-join", "deploy", "per-node", "node-a", "node-b"}

// selected reports whether the scenario name runs, which it does when
// RC_CLUSTER_SCENARIOS (comma-separated; unset: all) names it or the run
// needs it. A
// developer's shortcut: under CI=true a scenario left out fails, as the
// tier must run whole there.
func selected(t *testing.T, name string) bool {
	v := os.Getenv("RC_CLUSTER_SCENARIOS")
	if v == "" || slices.Contains(setUp, name) || slices.Contains(strings.Split(v, ","), name) {
		return true
	}
	if testenv.InCI() {
		t.Fatalf("RC_CLUSTER_SCENARIOS=%s leaves %s out, and CI runs the whole tier", v, name)
	}
	t.Logf("CLUSTER-SCENARIO %s not run: RC_CLUSTER_SCENARIOS=%s leaves it out", name, v)
	return false
}

// scenarioTimes records how long each scenario ran and whether it passed,
// in the order they ended, and the figures scenarios add, for the tier's
// CLUSTER-SUMMARY line.
type scenarioTimes struct {
	mu      sync.Mutex
	lines   []string
	figures []string
}

// figure adds a scenario's figure to the summary.
func (s *scenarioTimes) figure(f string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.figures = append(s.figures, f)
}

// run is t.Run of name, recorded. A parallel subtest's t.Run returns when
// it pauses, and a test's parallel subtests run after its function
// returns: its time is recorded by its cleanup, which waits for both.
func (s *scenarioTimes) run(t *testing.T, name string, f func(*testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		if !selected(t, name) {
			t.SkipNow()
		}
		start := time.Now()
		t.Cleanup(func() {
			state := "passed"
			if t.Failed() {
				state = "FAILED"
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.lines = append(s.lines, fmt.Sprintf("%s %.0fs %s", strings.TrimPrefix(t.Name(), "TestCluster/"), time.Since(start).Seconds(), state))
		})
		f(t)
	})
}

func (s *scenarioTimes) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.figures) == 0 {
		return strings.Join(s.lines, "; ")
	}
	return strings.Join(s.lines, "; ") + "; figures: " + strings.Join(s.figures, "; ")
}

// holdForDebugging keeps the cluster up after the scenarios while the file
// RC_CLUSTER_HOLD names exists, for a developer's kubectl (the admin
// kubeconfig's path is logged). Unset, it does nothing.
func holdForDebugging(t *testing.T, cp *controlPlane) {
	hold := os.Getenv("RC_CLUSTER_HOLD")
	if hold == "" {
		return
	}
	if err := os.WriteFile(hold, []byte(cp.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("holding the cluster until %s is removed: KUBECONFIG=%s %s", hold, cp.admin, cp.kubectl)
	for {
		if _, err := os.Stat(hold); err != nil {
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// testNodesJoin boots the node VMs; each kubelet registers through the
// guest's forward with its static token and the node turns Ready.
func testNodesJoin(t *testing.T, owner testing.TB, cp *controlPlane) []*nodeVM {
	start := time.Now()
	vms := bootNodes(t, owner, cp)
	for _, vm := range vms {
		vm.waitReady(t, 40*time.Minute)
		t.Logf("CLUSTER-TIME %s: qemu start to kubelet and device plugin running %.1f s", vm.name, vm.ready.Seconds())
	}
	for _, vm := range vms {
		cp.poll(t, 20*time.Minute, func(s string) bool { return s == "True" },
			"get", "node", vm.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		t.Logf("CLUSTER-TIME %s: Ready in the API %.1f s after the first qemu start", vm.name, time.Since(start).Seconds())
		info, _ := cp.kubectlOut("get", "node", vm.name, "-o",
			`jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kernelVersion} {.status.addresses}`)
		t.Logf("CLUSTER-VERSION node %s: %s", vm.name, info)
	}
	return vms
}

// testControlPlane checks that the API answers the admin through
// kubectl, and the controller-manager did its first work (default
// ServiceAccounts, the kube-root-ca.crt ConfigMap in every namespace).
func testControlPlane(t *testing.T, cp *controlPlane) {
	ver := cp.poll(t, time.Minute, func(s string) bool { return strings.Contains(s, `"gitVersion"`) }, "get", "--raw", "/version")
	t.Logf("API /version: %s", strings.Join(strings.Fields(ver), " "))
	start := time.Now()
	for _, ns := range []string{"default", "kube-system"} {
		cp.poll(t, 3*time.Minute, func(s string) bool { return s == "serviceaccount/default" },
			"get", "serviceaccount", "default", "-n", ns, "-o", "name")
		cp.poll(t, 3*time.Minute, func(s string) bool { return s == "configmap/kube-root-ca.crt" },
			"get", "configmap", "kube-root-ca.crt", "-n", ns, "-o", "name")
	}
	// The controllers' own service accounts: --use-service-account-credentials
	// made the controller-manager act as each.
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "serviceaccount/daemon-set-controller" },
		"get", "serviceaccount", "daemon-set-controller", "-n", "kube-system", "-o", "name")
	if out, err := cp.kubectlOut("auth", "can-i", "create", "pods"); err != nil || out != "yes" {
		t.Errorf("admin cannot create pods: %v: %s", err, out)
	}
	var rss []string
	total := 0
	for _, p := range cp.procs {
		mb := p.rssMB()
		rss = append(rss, fmt.Sprintf("%s %d", p.name, mb))
		total += mb
	}
	t.Logf("CLUSTER-TIME control plane: /readyz %.1f s after etcd's start, default service accounts %.1f s after that; RSS MB: %s; total %d",
		cp.started.Seconds(), time.Since(start).Seconds(), strings.Join(rss, ", "), total)
}
