//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testRollout makes a rolling update of the rdma-chain DaemonSet (`kubectl
// rollout restart`, its RollingUpdate strategy as shipped) while the
// Lingjun Job's pods hold RDMA on both nodes. The rollout completes with a
// new DaemonSet pod on each node; the pods stay Ready with rdma0 and the
// same address, which their node still holds as a GID; node-a's SMC socket
// hook stays held, not loaded again by the new pod. Deleted afterwards,
// they leave no record and no GID of theirs on either node: the new pods'
// plugin undid what the old ones' did.
//
// An upgrade from the newest release's image to this tree's and back
// cannot run: v0.2.0 (docs/releases.md) predates the
// image, the DaemonSet's ops binary and the DRA driver. The VM tier's
// upgrade scenarios cross from v0.2.0's plugin at the binary level.
func testRollout(t *testing.T, cp *controlPlane, p pair) {
	addrs := make([]string, len(p.pods))
	old := make([]string, len(p.pods))
	for i, pod := range p.pods {
		addrs[i] = podRDMAAddr(t, cp, pod)
		old[i] = cp.dsPod(t, p.nodes[i])
	}
	hook := cp.nodeShell(t, nodeNames[0], hookState)
	start := time.Now()
	if out, err := cp.kubectlOut("-n", "kube-system", "rollout", "restart", "daemonset/rdma-chain"); err != nil {
		t.Fatalf("rollout restart: %v: %s", err, out)
	}
	out, err := cp.kubectlOut("-n", "kube-system", "rollout", "status", "daemonset/rdma-chain", "--timeout=15m")
	if err != nil {
		t.Fatalf("rollout status: %v: %s", err, out)
	}
	t.Logf("CLUSTER-TIME rollout restart of daemonset/rdma-chain on %d nodes: %.1f s (%s)", len(p.nodes), time.Since(start).Seconds(), lastLine(out))
	for i, pod := range p.pods {
		node := p.nodes[i]
		now := cp.poll(t, 3*time.Minute, func(s string) bool { return s != "" && !strings.Contains(s, old[i]) },
			"-n", "kube-system", "get", "pods", "-l", "app=rdma-chain", "--field-selector", "spec.nodeName="+node,
			"-o", "jsonpath={.items[*].metadata.name}")
		cp.podBecomesReady(t, pod, time.Minute)
		addr := podRDMAAddr(t, cp, pod)
		gids := cp.nodeShell(t, node, "cat /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null; true")
		t.Logf("%s: rdma-chain pod %s -> %s; %s Ready, rdma0 %s (before: %s), a GID of %s: %v",
			node, old[i], now, pod, addr, addrs[i], node, strings.Contains(gids, expandIPv6(addr)))
		if addr != addrs[i] || !strings.Contains(gids, expandIPv6(addr)) {
			t.Errorf("%s lost its RDMA across the rollout: rdma0 %s, before %s", pod, addr, addrs[i])
		}
	}
	// The SMC socket hook's hold is a bpffs pin of the node, not the pod's:
	// the new reconcile finds it held and keeps it.
	newLogs, _ := cp.kubectlOut("-n", "kube-system", "logs", cp.dsPod(t, nodeNames[0]), "-c", "reconcile")
	if after := cp.nodeShell(t, nodeNames[0], hookState); !hookHeld(hook) || after != hook ||
		strings.Contains(newLogs, "holding the SMC socket hook loaded") {
		t.Errorf("SMC socket hook on %s: before the rollout\n%s\nafter\n%s\nthe new reconcile's log:\n%s", nodeNames[0], hook, after, newLogs)
	} else {
		t.Logf("SMC socket hook on %s held across the rollout, not loaded again: %q", nodeNames[0], strings.Fields(after))
	}
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/lingjun-job.yaml")
	if out, err := cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "" }, "get", "pods", "-l", "app=lingjun-rping", "-o", "name")
	for i, pod := range p.pods {
		node := p.nodes[i]
		var left string
		cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
			left = cp.nodeShell(t, node, `grep -l '"`+pod+`"' /host/var/lib/cni/rdma-chain/attachments/*.json 2>/dev/null
cat /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null | grep -x '`+expandIPv6(addrs[i])+`'; true`)
			return left == "", pod + "'s record or GID is left on " + node + ": " + left
		})
		t.Logf("%s deleted: no record names it on %s, and no GID there is %s", pod, node, addrs[i])
	}
}
