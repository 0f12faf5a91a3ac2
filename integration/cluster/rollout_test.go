//go:build cluster

package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testRollout rolls the DaemonSets back to the newest release's image
// (docs/releases.md; built from its commit, its digest checked, pushed to
// the tier's registry) and up again to this tree's, as docs/install.md's
// "Upgrading and rolling back" says (the image's digest set in the
// admin's kustomization, `kubectl apply -k`, rollout status), while the
// Lingjun Job's pods hold RDMA on both nodes. Each rollout completes with a
// new DaemonSet pod on each node running the image it names; the pods stay
// Ready with rdma0 and the same address, which their node still holds as a
// GID; node-a's SMC socket hook stays held, not loaded again by the new
// pod. Deleted afterwards, they leave no record and no GID of theirs on
// either node: the plugin of this tree undid what the release's and its
// own did.
func testRollout(t *testing.T, cp *controlPlane, p pair) {
	version, digest := cp.pushRelease(t)
	addrs := make([]string, len(p.pods))
	for i, pod := range p.pods {
		addrs[i] = podRDMAAddr(t, cp, pod)
	}
	hook := cp.nodeShell(t, nodeNames[0], hookState)
	for _, to := range []struct{ what, digest string }{{version, digest}, {"this tree's image", cp.digest}} {
		old := make([]string, len(p.pods))
		for i := range p.pods {
			old[i] = cp.dsPod(t, p.nodes[i])
		}
		took := cp.rollTo(t, to.digest)
		t.Logf("CLUSTER-TIME rollout of both DaemonSets to %s (%s) on %d nodes: %.1f s", to.what, to.digest, len(p.nodes), took.Seconds())
		checkRolled(t, cp, p, addrs, old, hook)
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

// rollTo sets the admin's kustomization's image to the registry's
// digest (writeInstall, as `kustomize edit set image` does), applies it
// with `kubectl apply -k`, waits for both DaemonSets' rollouts and checks
// that every container runs that digest; it returns how long that took.
func (cp *controlPlane) rollTo(t *testing.T, digest string) time.Duration {
	t.Helper()
	if err := writeInstall(cp.install, "integration/cluster/deploy", cp.repo, digest); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-k", cp.install); err != nil {
		t.Fatalf("kubectl apply -k: %v: %s", err, out)
	}
	for _, ds := range []string{"rdma-chain", "rdma-chain-dra"} {
		if out, err := cp.kubectlOut("-n", "kube-system", "rollout", "status", "daemonset/"+ds, "--timeout=15m"); err != nil {
			t.Fatalf("rollout status %s: %v: %s", ds, err, out)
		}
	}
	took := time.Since(start)
	cp.assertDaemonSetImage(t, cp.repo+"@"+digest)
	cp.stayedUp(t)
	return took
}

// stayedUp waits until every DaemonSet pod of the install has been Ready
// for 15 s without a restart, and fails at once on a restart: rollout
// status may count a pod whose container exits right after its start (a
// flag its binary does not know), Ready for that moment.
func (cp *controlPlane) stayedUp(t *testing.T) {
	t.Helper()
	const held = 15 * time.Second
	cp.pollFunc(t, 3*time.Minute, func() (bool, string) {
		out, err := cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app in (rdma-chain,rdma-chain-dra)", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastTransitionTime} {.status.containerStatuses[*].restartCount}{"\n"}{end}`)
		if err != nil {
			return false, fmt.Sprintf("pods: %v: %s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				return false, "pod not up yet: " + line
			}
			for _, n := range f[3:] {
				if n != "0" {
					t.Fatalf("DaemonSet pod %s restarted after its rollout (restarts per container: %s):\n%s", f[0], strings.Join(f[3:], " "), out)
				}
			}
			since, err := time.Parse(time.RFC3339, f[2])
			if f[1] != "True" || err != nil || time.Since(since) < held {
				return false, "pod not Ready for " + held.String() + " yet: " + line
			}
		}
		return true, ""
	}, func() string { return "" })
}

// checkRolled checks, after a rollout, that each of p's pods' node has a
// DaemonSet pod other than old's, and the pod is Ready with its address of
// addrs still a GID of its node; and that node-a's SMC socket hook is as
// hook says, held, and the new reconcile did not load it again.
func checkRolled(t *testing.T, cp *controlPlane, p pair, addrs, old []string, hook string) {
	t.Helper()
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
}
