//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testImage is the pods' image (busybox, ip, rdma, rping, perftest's
// ib_send_bw and ib_send_lat).
const testImage = "localhost/rdma-chain-test:node"

var debugPodName = regexp.MustCompile(`Creating debugging pod (\S+) with container`)

// debugStart runs args on node through `kubectl debug node/NODE
// --profile=sysadmin` (host network and PID namespaces, privileged, the
// node's root at /host), as docs/install.md tells an admin, and returns
// the debug pod's name.
func (cp *controlPlane) debugStart(t *testing.T, node, image string, args ...string) string {
	t.Helper()
	out, err := cp.kubectlOut(append([]string{"debug", "node/" + node, "--profile=sysadmin", "--image=" + image,
		"--image-pull-policy=Never", "--"}, args...)...)
	m := debugPodName.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("kubectl debug node/%s: %v: %s", node, err, out)
	}
	return m[1]
}

// debugWait waits for a debug pod to end and returns its log and whether
// its command exited 0; the pod is deleted.
func (cp *controlPlane) debugWait(t *testing.T, pod string, timeout time.Duration) (string, bool) {
	t.Helper()
	phase := cp.poll(t, timeout, func(s string) bool { return s == "Succeeded" || s == "Failed" },
		"get", "pod", pod, "-o", "jsonpath={.status.phase}")
	logs, err := cp.kubectlOut("logs", pod)
	if err != nil {
		t.Fatalf("kubectl logs %s: %v: %s", pod, err, logs)
	}
	_, _ = cp.kubectlOut("delete", "pod", pod, "--wait=false")
	return logs, phase == "Succeeded"
}

// nodeShell runs a busybox shell script on node (the node's root at
// /host) in the tier's shell pod there (pods/node-shell.yaml) and returns
// what it printed; a script that fails or runs over 5 minutes fails t.
func (cp *controlPlane) nodeShell(t *testing.T, node, script string) string {
	t.Helper()
	start := time.Now()
	out, err := cp.nodeExec(t, node, script)
	if err != nil {
		t.Fatalf("script on %s failed after %.1f s: %v:\n%s\n--- script:\n%s", node, time.Since(start).Seconds(), err, out, script)
	}
	return out
}

// nodeExec is nodeShell's `kubectl exec`, its failure returned.
func (cp *controlPlane) nodeExec(t *testing.T, node, script string) (string, error) {
	t.Helper()
	pod := cp.shellPod(t, node)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return cp.kubectlCtx(ctx, "-n", "kube-system", "exec", pod, "--", "/bin/busybox", "sh", "-c", script)
}

// startNodeShells applies the tier's shell DaemonSet; shellPod waits for
// its pod on a node.
func startNodeShells(t *testing.T, cp *controlPlane) {
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/node-shell.yaml")
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

func (cp *controlPlane) shellPod(t *testing.T, node string) string {
	t.Helper()
	cp.shellsMu.Lock()
	defer cp.shellsMu.Unlock()
	if pod := cp.shells[node]; pod != "" {
		return pod
	}
	out := cp.poll(t, 10*time.Minute, func(s string) bool { return strings.HasSuffix(s, " Running") },
		"-n", "kube-system", "get", "pods", "-l", "app=rc-node-shell", "--field-selector", "spec.nodeName="+node,
		"-o", "jsonpath={.items[0].metadata.name} {.items[0].status.phase}")
	if cp.shells == nil {
		cp.shells = map[string]string{}
	}
	cp.shells[node] = strings.Fields(out)[0]
	return cp.shells[node]
}

// dsPod is the rdma-chain DaemonSet's pod on node.
func (cp *controlPlane) dsPod(t *testing.T, node string) string {
	t.Helper()
	return cp.poll(t, time.Minute, func(s string) bool { return strings.HasPrefix(s, "rdma-chain-") },
		"-n", "kube-system", "get", "pods", "-l", "app=rdma-chain", "--field-selector", "spec.nodeName="+node,
		"-o", "jsonpath={.items[0].metadata.name}")
}

// testPrimaryRewrite checks that the primary's agent rewrites its conflist
// on a node from its own copy, without the rdma-chain entry, as Calico's,
// Flannel's or Terway's do on restart; the DaemonSet's reconcile puts the
// entry back within seconds (its pass interval is 30 s), logs it and
// counts it. The scenarios after this one start RDMA pods on this node
// through the restored entry.
func testPrimaryRewrite(t *testing.T, cp *controlPlane) {
	node := nodeNames[0]
	out := cp.nodeShell(t, node, `F=/host/etc/cni/net.d/10-podnet.conflist
grep -q '"type": "rdma-chain"' $F || { echo "no entry before the rewrite:"; cat $F; exit 1; }
cp /host/etc/podnet/10-podnet.conflist $F
i=0
until grep -q '"type": "rdma-chain"' $F; do
	i=$((i+1))
	[ $i -le 600 ] || { echo "entry not back after 60 s:"; cat $F; exit 1; }
	sleep 0.1
done
echo "entry back after $i polls of 0.1 s"
wget -qO- http://127.0.0.1:9742/metrics | grep '^rdma_chain_conflist_restores_total'`)
	t.Logf("%s: %s", node, strings.ReplaceAll(out, "\n", "; "))
	if !strings.Contains(out, "rdma_chain_conflist_restores_total 1") {
		t.Errorf("%s: restores metric, want 1: %s", node, out)
	}
	pod := cp.dsPod(t, node)
	logs, err := cp.kubectlOut("-n", "kube-system", "logs", pod, "-c", "reconcile")
	if err != nil || !strings.Contains(logs, `msg="put the rdma-chain entry back: another agent had rewritten the conflist without it" conflist=/etc/cni/net.d/10-podnet.conflist`) {
		t.Errorf("%s reconcile log: %v:\n%s", pod, err, logs)
	}
}

// testUninstall runs the admin's uninstall exactly as docs/install.md gives
// it: the DaemonSets deleted with `kubectl delete -k`, then `rdma-chain-ops
// uninstall --host-root /host ... --wait 10m` in a `kubectl debug node` pod
// of the image the DaemonSet ran, on every node. On node-a a pod holds an
// attachment: uninstall drains the entry and waits; once the pod is deleted
// (its DEL, through the draining entry, gives rdma0, the GIDs and the lease
// back) the entry, the SMC socket hook the DaemonSet held and the binaries
// go. Nothing is left of the pod on node-a, and a new pod still starts
// there on the primary alone.
func testUninstall(t *testing.T, cp *controlPlane) {
	cp.podReady(t, "uninstall-keeper", 10*time.Minute)
	gid := expandIPv6(podRDMAAddr(t, cp, "uninstall-keeper"))
	// Where smcr.transparent auto uses the SMC socket hook (node-a's 6.12),
	// the DaemonSet holds its program loaded between pods, and uninstall
	// releases it; node-b's 7.3 has no SMC and holds nothing, which each
	// reconcile says once. The hold is the node's (a bpffs pin): the pod that
	// took it and said so was replaced in the daemonset-rollout scenario.
	if held := cp.nodeShell(t, nodeNames[0], hookState); !hookHeld(held) {
		t.Errorf("SMC socket hook on %s: want it attached and held:\n%s", nodeNames[0], held)
	}
	notHeld := `msg="SMC socket hook not held" bpffsDir=/sys/fs/bpf/rdma-chain why="not the mechanism of this node`
	logs, err := cp.kubectlOut("-n", "kube-system", "logs", cp.dsPod(t, nodeNames[1]), "-c", "reconcile")
	if err != nil || !strings.Contains(logs, notHeld) {
		t.Errorf("reconcile on %s: want %q in its log (%v):\n%s", nodeNames[1], notHeld, err, logs)
	}
	image, err := cp.kubectlOut("-n", "kube-system", "get", "daemonset", "rdma-chain", "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="reconcile")].image}`)
	if err != nil || image == "" {
		t.Fatalf("the DaemonSet's image: %v: %s", err, image)
	}
	if out, err := cp.kubectlOut("delete", "-k", cp.install, "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("kubectl delete -k: %v: %s", err, out)
	}
	cp.poll(t, 5*time.Minute, func(s string) bool { return s == "" },
		"-n", "kube-system", "get", "pods", "-l", "app=rdma-chain", "-o", "name")
	uninstall := []string{"/rdma-chain-ops", "uninstall", "--host-root", "/host", "--conflist", "auto", "--cni-bin-dir", "/opt/cni/bin",
		"--cri-socket", "/run/containerd/containerd.sock", "--wait", "10m"}
	t.Logf("on each node: kubectl debug node/NODE --profile=sysadmin --image=%s -- %s", image, strings.Join(uninstall, " "))
	start := time.Now()
	// Every node's at once, as an admin's loop over the nodes would: only
	// node-a's has a pod to wait for.
	pods := make([]string, len(nodeNames))
	for i, node := range nodeNames {
		pods[i] = cp.debugStart(t, node, image, uninstall...)
	}
	cp.poll(t, 5*time.Minute, func(s string) bool { return strings.Contains(s, "waiting up to 10m0s for their pods to go") }, "logs", pods[0])
	if out, err := cp.kubectlOut("delete", "pod", "uninstall-keeper", "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
	for i, node := range nodeNames {
		out, ok := cp.debugWait(t, pods[i], 10*time.Minute)
		t.Logf("uninstall on %s (exit 0: %v, %.0f s after the first started):\n%s", node, ok, time.Since(start).Seconds(), out)
		wants := []string{"/etc/cni/net.d/10-podnet.conflist: rdma-chain entry removed", "/opt/cni/bin/rdma-chain: removed"}
		if i == 0 {
			wants = append(wants, "/sys/fs/bpf/rdma-chain: SMC socket hook released")
		}
		for _, want := range wants {
			if !ok || !strings.Contains(out, want) {
				t.Errorf("uninstall on %s: want exit 0 and %q", node, want)
			}
		}
	}
	left := cp.nodeShell(t, nodeNames[0], fmt.Sprintf(`echo "entries $(grep -c '"rdma-chain"' /host/etc/cni/net.d/10-podnet.conflist)"
echo "binaries $(ls /host/opt/cni/bin | grep -c '^rdma-chain')"
echo "records $(ls /host/var/lib/cni/rdma-chain/attachments 2>/dev/null | grep -vc '^\.')"
echo "leases $(ls /host/var/lib/cni/networks-rdma/* 2>/dev/null | grep -c ':')"
echo "gids $(cat /sys/class/infiniband/rxe0/ports/1/gids/* | grep -c '^%s$')"`, gid))
	t.Logf("node-a after uninstall: %s", strings.ReplaceAll(left, "\n", "; "))
	for _, want := range []string{"entries 0", "binaries 0", "records 0", "leases 0", "gids 0"} {
		if !strings.Contains(left, want+"\n") && !strings.HasSuffix(left, want) {
			t.Errorf("node-a after uninstall: want %q in\n%s", want, left)
		}
	}
	cp.podReady(t, "after-uninstall", 5*time.Minute)
}

// podReady applies integration/cluster/pods/NAME.yaml, a pod named NAME
// that t's end deletes, and waits until it is Ready.
func (cp *controlPlane) podReady(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	manifest := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods", name+".yaml")
	if out, err := cp.kubectlOut("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", manifest, "--wait=false") })
	cp.podBecomesReady(t, name, timeout)
}
