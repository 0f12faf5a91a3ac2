//go:build cluster

package cluster

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// rxeCounters prints node's rxe0 sent and received RoCE packets.
const rxeCounters = "cat " + rxe + "/hw_counters/sent_pkts " + rxe + "/hw_counters/rcvd_pkts"

// testSameNode checks that two RDMA pods on node-a rping each other from
// inside their containers over their rdma0 addresses (RoCE v2 over rxe0;
// node-a's rxe0 counts the packets), and perftest's send bandwidth and
// latency between them is printed beside the same tests between node-a's
// own address and itself on the same rxe0. The DaemonSet's per-pod usage
// series show each pod's QPs, MRs and MR bytes while an rping runs
// between them, and none once it is killed. Then kubelet is killed under
// them and its supervisor starts it again (the node tier's kubelet
// restart): CRI's NetworkReady turns false while kubelet is down and true
// again, the node turns Ready again, both pods stay Ready with rdma0, the
// same address and the same containers, and rping runs again. Deleted,
// the pods are named by no series of the node's metrics. The
// DaemonSet pod's restart under running pods is the daemonset-rollout
// scenario's.
func testSameNode(t *testing.T, cp *controlPlane) {
	node := nodeNames[0]
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/same-node-rping.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	pods := []string{"rping-server", "rping-client"}
	for _, pod := range pods {
		cp.podBecomesReady(t, pod, 10*time.Minute)
	}
	t.Logf("CLUSTER-TIME same-node-rping: both pods Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	for _, pod := range pods {
		cp.requireRDMA0(t, node, pod)
	}
	addr := podRDMAAddr(t, cp, "rping-server")
	sameNodeRping(t, cp, node, addr)
	samePerf(t, cp, node, addr, podRDMAAddr(t, cp, "rping-client"))
	testPodUsage(t, cp, node, "rping-server", "rping-client", addr)

	containers := cp.containerIDs(t, pods)
	pid := strings.TrimSpace(cp.nodeShell(t, node, "pidof kubelet"))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("kubelet's pid on %s: %q", node, pid)
	}
	restart := time.Now()
	// CRI's NetworkReady is watched from the node itself, as exec goes
	// through kubelet; the exec runs the kill after it ends.
	cp.nodeShell(t, node, "rm -f /host/run/rc-netready.log; setsid /bin/busybox sh -c '"+netReadyWatch+"' </dev/null >/dev/null 2>&1 &"+
		"setsid /bin/busybox sh -c 'sleep 1; kill "+pid+"' </dev/null >/dev/null 2>&1 &")
	cp.pollFunc(t, 3*time.Minute, func() (bool, string) {
		now, err := cp.nodeExec(t, node, "pidof kubelet")
		now = strings.TrimSpace(now)
		return err == nil && now != "" && now != pid, "kubelet not running again: " + now
	})
	cp.poll(t, 5*time.Minute, func(s string) bool { return s == "ok" }, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/healthz")
	// The node's Ready condition as the new kubelet reported it: a
	// heartbeat from after the kill (the guest's clock is the host's).
	cp.poll(t, 5*time.Minute, func(s string) bool {
		ready, beat, _ := strings.Cut(s, " ")
		at, err := time.Parse(time.RFC3339, beat)
		return ready == "True" && err == nil && at.After(restart)
	}, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}`)
	t.Logf("CLUSTER-TIME %s: kubelet killed, running again, healthy and Ready %.1f s later", node, time.Since(restart).Seconds())
	cp.networkReadyAgain(t, node)
	for _, pod := range pods {
		cp.podBecomesReady(t, pod, 3*time.Minute)
		cp.requireRDMA0(t, node, pod)
	}
	if after := cp.containerIDs(t, pods); after != containers {
		t.Errorf("the pods' containers changed across kubelet's restart: %s, before %s", after, containers)
	}
	if again := podRDMAAddr(t, cp, "rping-server"); again != addr {
		t.Errorf("rping-server's rdma0 %s after kubelet's restart, %s before", again, addr)
	}
	sameNodeRping(t, cp, node, addr)
	if out, err := cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	assertUsageGone(t, cp, node, pods...)
}

// netReadyWatch runs on the node (through the shell pod's /host) while
// kubelet is down: CRI's NetworkReady, as containerd reports it from the
// conflist's CNI STATUS, must turn false (the plugin's STATUS is 50 while
// kubelet's pod-resources socket does not answer, docs/configuration.md
// kubeletUnreachable) and true again once kubelet is back.
const netReadyWatch = `chroot /host /usr/local/bin/nodectl netready 240 >/host/run/rc-netready.log 2>&1; echo "exit $?" >>/host/run/rc-netready.log`

// networkReadyAgain waits for netReadyWatch's end and fails t unless it
// saw NetworkReady false, then true.
func (cp *controlPlane) networkReadyAgain(t *testing.T, node string) {
	t.Helper()
	var log string
	cp.pollFunc(t, 4*time.Minute, func() (bool, string) {
		log = cp.nodeShell(t, node, "cat /host/run/rc-netready.log 2>/dev/null; true")
		return strings.Contains(log, "exit "), "the NetworkReady watch has not ended: " + log
	})
	if !strings.Contains(log, "exit 0") || !strings.Contains(log, "NODE-NETREADY false for") {
		t.Errorf("CRI NetworkReady on %s across kubelet's restart: %s", node, log)
		return
	}
	t.Logf("%s: CRI NetworkReady across kubelet's restart: %s", node, strings.TrimSpace(strings.SplitN(log, "\n", 2)[0]))
}

// requireRDMA0 fails t when pod has no rdma0, with what node's plugin log
// and its DaemonSet pod's reconcile say of the pod: an rdma/hca pod
// without its link is either an ADD that did not give it (kubelet's
// pod-resources reported no device for it: kubelet logs a claim it could
// not read) or a later change that took it.
func (cp *controlPlane) requireRDMA0(t *testing.T, node, pod string) {
	t.Helper()
	out, err := cp.exec(pod, "/usr/sbin/ip", "-o", "link", "show", "dev", "rdma0")
	if err == nil {
		return
	}
	// The attached line names the container, not the pod: the pod's
	// containers are read from its own lines first.
	log, _ := cp.nodeExec(t, node, `f=/host/var/log/rdma-chain.log
ids=$(grep 'pod=default/`+pod+` ' $f | sed -n 's/.* container=\([^ ]*\).*/\1/p' | sort -u | tr '\n' '|')
grep -E "container=(${ids%|}) |verb=(GC|DEL) |repair|reclaim" $f | tail -n 40
echo "--- kubelet on what pod-resources could not read of the pod's devices:"
grep -E 'claim info state|dynamic resources|pod-resources' /host/run/kubelet.log | tail -n 10`)
	links, _ := cp.exec(pod, "/usr/sbin/ip", "-d", "link")
	rec, _ := cp.kubectlOut("-n", "kube-system", "logs", cp.dsPod(t, node), "-c", "reconcile", "--tail=40")
	events, _ := cp.kubectlOut("get", "events", "--field-selector", "involvedObject.name="+pod,
		"-o", `jsonpath={range .items[*]}{.lastTimestamp} {.reason} x{.count}: {.message}{"\n"}{end}`)
	t.Fatalf("%s on %s has no rdma0: %v: %s\n--- its links:\n%s\n--- %s's plugin log (this pod, GC, DEL, repair):\n%s\n--- reconcile:\n%s\n--- its events:\n%s\n--- the DRA driver's claim lines:\n%s",
		pod, node, err, out, links, node, log, rec, events, cp.draClaimLines(node))
}

// draClaimLines are the last lines node's DRA driver logged of preparing
// and unpreparing claims, or why there are none.
func (cp *controlPlane) draClaimLines(node string) string {
	pod, err := cp.draPodOn(node)
	if err != nil {
		return err.Error()
	}
	logs, err := cp.kubectlOut("-n", "kube-system", "logs", pod, "--tail=400")
	if err != nil {
		return fmt.Sprintf("logs of %s: %v: %s", pod, err, logs)
	}
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "prepare") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// draPodOn is the name of the DRA driver's pod on node.
func (cp *controlPlane) draPodOn(node string) (string, error) {
	pod, err := cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app=rdma-chain-dra", "--field-selector", "spec.nodeName="+node,
		"-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		return "", fmt.Errorf("the DRA driver's pod on %s: %w: %s", node, err, pod)
	}
	if pod == "" {
		return "", fmt.Errorf("no DRA driver pod on %s", node)
	}
	return pod, nil
}

// containerIDs lists the pods' containers' IDs, which a container that
// is started again does not keep.
func (cp *controlPlane) containerIDs(t *testing.T, pods []string) string {
	t.Helper()
	out, err := cp.kubectlOut(append(append([]string{"get", "pod"}, pods...), "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.containerStatuses[*].containerID} {end}`)...)
	if err != nil || strings.Count(out, "containerd://") != len(pods) {
		t.Fatalf("the containers of %v: %v: %q", pods, err, out)
	}
	return out
}

// sameNodeRping has rping-client ping rping-server at addr 10 times and
// checks that node's rxe0 counts the packets sent and received.
func sameNodeRping(t *testing.T, cp *controlPlane, node, addr string) {
	t.Helper()
	before := strings.Fields(cp.nodeShell(t, node, rxeCounters))
	ok, out, took := cp.rping("rping-server", "rping-client", addr, 3)
	after := strings.Fields(cp.nodeShell(t, node, rxeCounters))
	if len(before) != 2 || len(after) != 2 {
		t.Fatalf("rxe0's counters on %s: %v, %v", node, before, after)
	}
	sent, rcvd := atoi(t, after[0])-atoi(t, before[0]), atoi(t, after[1])-atoi(t, before[1])
	if !ok || sent == 0 || rcvd == 0 {
		t.Fatalf("rping pod-to-pod on %s -> [%s]: rxe0 sent %d, received %d: %s", node, addr, sent, rcvd, out)
	}
	t.Logf("CLUSTER-FIGURE rping pod-to-pod on %s -> [%s]: 10 pings in %.2f s; rxe0 sent %d and received %d RoCE packets",
		node, addr, took.Seconds(), sent, rcvd)
}
