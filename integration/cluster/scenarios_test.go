//go:build cluster

package cluster

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testDeploy installs rdma-chain as docs/install.md's quick start tells an
// admin whose primary is not Terway: the image pushed with its `make push`
// line to the tier's registry, the nodes labelled (node-a with
// rdma-chain.github.io/enabled=true, node-b with the old name
// rdma-chain/enabled=true, kept for one release), then `kubectl apply -k`
// of a kustomization of their own listing the tier's install
// (integration/cluster/deploy: deploy/overlays/generic, the DRA component,
// their entry) with the pushed image set by digest. The DaemonSets roll
// out on every node, their image pulled by each node's containerd from the
// registry, the install container finds the primary's conflist by itself
// (--conflist auto), and each node's allocatable holds the device plugin's
// resources.
func testDeploy(t *testing.T, cp *controlPlane) {
	cp.repo, cp.digest = pushImage(t, cp.registryPort)
	cp.install = filepath.Join(cp.dir, "my-rdma-chain")
	if err := writeInstall(cp.install, "integration/cluster/deploy", cp.repo, cp.digest); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, n := range nodeNames {
		label := "rdma-chain.github.io/enabled=true"
		if i%2 == 1 {
			label = "rdma-chain/enabled=true"
		}
		if out, err := cp.kubectlOut("label", "node", n, label); err != nil {
			t.Fatalf("kubectl label: %v: %s", err, out)
		}
	}
	if out, err := cp.kubectlOut("apply", "-k", cp.install); err != nil {
		t.Fatalf("kubectl apply -k: %v: %s", err, out)
	}
	cp.rolledOut(t)
	t.Logf("CLUSTER-TIME DaemonSets rolled out on %d nodes in %.1f s, their image pulled from the registry", len(nodeNames), time.Since(start).Seconds())
	cp.assertDaemonSetImage(t, cp.repo+"@"+cp.digest)
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

// assertDaemonSetImage waits until every container of both DaemonSets'
// pods runs ref, the registry's image by digest (kubelet's imageID), not
// an image imported on the node: a replaced pod may still be listed while
// it terminates.
func (cp *controlPlane) assertDaemonSetImage(t *testing.T, ref string) {
	t.Helper()
	var ids string
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		ids, _ = cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app in (rdma-chain,rdma-chain-dra)", "-o",
			`jsonpath={range .items[*]}{.spec.nodeName} {.status.initContainerStatuses[*].imageID} {.status.containerStatuses[*].imageID}{"\n"}{end}`)
		lines := strings.Split(strings.TrimSpace(ids), "\n")
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) < 2 || slices.ContainsFunc(f[1:], func(id string) bool { return id != ref }) {
				return false, "want every container on " + ref + ", got:\n" + ids
			}
		}
		return len(lines) == 2*len(nodeNames), "want a pod of each DaemonSet on each node, got:\n" + ids
	})
	t.Logf("the DaemonSets' containers' images: %s", strings.ReplaceAll(strings.TrimSpace(ids), "\n", "; "))
}

// rolledOut waits until both DaemonSets have rolled out on every node.
func (cp *controlPlane) rolledOut(t *testing.T) {
	t.Helper()
	for _, ds := range []string{"rdma-chain", "rdma-chain-dra"} {
		out, err := cp.kubectlOut("-n", "kube-system", "rollout", "status", "daemonset/"+ds, "--timeout=30m")
		if err != nil {
			pods, _ := cp.kubectlOut("-n", "kube-system", "get", "pods", "-o", "wide")
			events, _ := cp.kubectlOut("-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp")
			t.Fatalf("rollout status %s: %v: %s\n%s\n%s", ds, err, out, pods, events)
		}
		t.Logf("%s: %s", ds, lastLine(out))
	}
}
