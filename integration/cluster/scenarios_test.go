//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testDeploy installs rdma-chain as docs/install.md tells an admin whose
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
	for _, ds := range []string{"rdma-chain", "rdma-chain-dra"} {
		out, err := cp.kubectlOut("-n", "kube-system", "rollout", "status", "daemonset/"+ds, "--timeout=30m")
		if err != nil {
			pods, _ := cp.kubectlOut("-n", "kube-system", "get", "pods", "-o", "wide")
			events, _ := cp.kubectlOut("-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp")
			t.Fatalf("rollout status %s: %v: %s\n%s\n%s", ds, err, out, pods, events)
		}
		t.Logf("%s: %s", ds, lastLine(out))
	}
	t.Logf("CLUSTER-TIME DaemonSets rolled out on %d nodes in %.1f s", len(nodeNames), time.Since(start).Seconds())
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
