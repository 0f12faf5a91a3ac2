//go:build cluster

package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testenv"
)

// testDeploy: rdma-chain installed as docs/install.md tells an admin whose
// primary is not Terway: the nodes labelled rdma-chain/enabled=true, then
// `kubectl apply -k` of a kustomization of their own
// (integration/cluster/deploy) listing deploy/overlays/generic with their
// entry; the DaemonSet rolls out on every node, the install container finds
// the primary's conflist by itself (--conflist auto), and each node's
// allocatable holds the device plugin's resources.
func testDeploy(t *testing.T, cp *controlPlane) {
	start := time.Now()
	for _, n := range nodeNames {
		if out, err := cp.kubectlOut("label", "node", n, "rdma-chain/enabled=true"); err != nil {
			t.Fatalf("kubectl label: %v: %s", err, out)
		}
	}
	if out, err := cp.kubectlOut("apply", "-k", filepath.Join(testenv.RepoRoot(), "integration/cluster/deploy")); err != nil {
		t.Fatalf("kubectl apply -k: %v: %s", err, out)
	}
	out, err := cp.kubectlOut("-n", "kube-system", "rollout", "status", "daemonset/rdma-chain", "--timeout=30m")
	if err != nil {
		pods, _ := cp.kubectlOut("-n", "kube-system", "get", "pods", "-o", "wide")
		events, _ := cp.kubectlOut("-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp")
		t.Fatalf("rollout status: %v: %s\n%s\n%s", err, out, pods, events)
	}
	t.Logf("%s", out)
	t.Logf("CLUSTER-TIME DaemonSet rolled out on %d nodes in %.1f s", len(nodeNames), time.Since(start).Seconds())
	pods, _ := cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app=rdma-chain", "-o", "wide")
	t.Logf("%s", pods)
	for _, n := range nodeNames {
		for _, res := range []string{"rdma/hca", "aliyun/erdma"} {
			path := `jsonpath={.status.allocatable.` + strings.ReplaceAll(res, ".", `\.`) + `}`
			got := cp.poll(t, 5*time.Minute, func(s string) bool { return s != "" && s != "0" }, "get", "node", n, "-o", path)
			t.Logf("node %s allocatable %s: %s", n, res, got)
		}
	}
}

// testScheduling: a pod asking more rdma/hca than any node has stays
// Pending; the scheduler's reason is in its PodScheduled condition.
func testScheduling(t *testing.T, cp *controlPlane) {
	manifest := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/too-many-hca.yaml")
	if out, err := cp.kubectlOut("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", manifest, "--wait=false") })
	msg := cp.poll(t, 5*time.Minute, func(s string) bool { return strings.Contains(s, "Insufficient rdma/hca") },
		"get", "pod", "too-many-hca", "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="PodScheduled")].reason}: {.status.conditions[?(@.type=="PodScheduled")].message}`)
	if !strings.HasPrefix(msg, "Pending Unschedulable") {
		t.Errorf("pod too-many-hca: %s, want Pending Unschedulable", msg)
	}
	t.Logf("too-many-hca: %s", msg)
}

// testCrossNodeRping: the Lingjun Job (two pods, rdma/hca: 1, anti-affinity)
// runs one pod per node; each container has rdma0 with a global IPv6 address
// from its node's /64; rping from one container to the other over those
// addresses (RoCE v2 over soft-RoCE on the nodes' segment), through
// `kubectl exec` as a user would.
func testCrossNodeRping(t *testing.T, cp *controlPlane) {
	manifest := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/lingjun-job.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", manifest, "--wait=false") })
	out := cp.poll(t, 20*time.Minute, func(s string) bool { return strings.Count(s, " Running ") == 2 },
		"get", "pods", "-l", "app=lingjun-rping", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}{"\n"}{end}`)
	t.Logf("CLUSTER-TIME lingjun-rping: both pods Running %.1f s after kubectl apply", time.Since(start).Seconds())
	var pods, nodes []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			pods, nodes = append(pods, f[0]), append(nodes, f[2])
		}
	}
	if len(pods) != 2 || nodes[0] == nodes[1] {
		t.Fatalf("want two pods on two nodes: %q", out)
	}
	addrs := make([]string, 2)
	for i, p := range pods {
		a, err := cp.kubectlOut("exec", p, "--", "/usr/sbin/ip", "-6", "-o", "addr", "show", "dev", "rdma0", "scope", "global")
		if err != nil {
			t.Fatalf("%s: ip addr: %v: %s", p, err, a)
		}
		f := strings.Fields(a)
		for j := range f {
			if f[j] == "inet6" && j+1 < len(f) {
				addrs[i], _, _ = strings.Cut(f[j+1], "/")
			}
		}
		if addrs[i] == "" {
			t.Fatalf("%s on %s: no global IPv6 on rdma0: %s", p, nodes[i], a)
		}
		dev, _ := cp.kubectlOut("exec", p, "--", "/bin/busybox", "ls", "/dev/infiniband")
		t.Logf("%s on %s: rdma0 %s; /dev/infiniband: %s", p, nodes[i], addrs[i], strings.Join(strings.Fields(dev), " "))
	}
	// The server in the first pod for as long as the client tries.
	srv := exec.Command(cp.kubectl, "--kubeconfig", cp.admin, "exec", pods[0], "--",
		"/bin/busybox", "timeout", "300", "/usr/bin/rping", "-s", "-a", addrs[0], "-C", "10")
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	rstart := time.Now()
	var last string
	testenv.Eventually(t, 4*time.Minute, func() (bool, string) {
		o, err := cp.kubectlOut("exec", pods[1], "--", "/bin/busybox", "timeout", "60",
			"/usr/bin/rping", "-c", "-a", addrs[0], "-C", "10", "-v")
		last = o
		if err == nil && strings.Count(o, "ping data") == 10 {
			return true, ""
		}
		time.Sleep(3 * time.Second) // the server may not listen yet
		return false, fmt.Sprintf("rping %s -> %s: %v: %s; server: %s", pods[1], addrs[0], err, o, srvOut.String())
	})
	t.Logf("CLUSTER-TIME rping %s (%s) -> %s (%s) [%s]: 10 pings, %.1f s from the server's start",
		pods[1], nodes[1], pods[0], nodes[0], addrs[0], time.Since(rstart).Seconds())
	t.Logf("%s", strings.Join(strings.Split(last, "\n")[:2], " / "))
}
