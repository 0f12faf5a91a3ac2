//go:build cluster

package cluster

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// pair is two pods of one workload on two nodes.
type pair struct {
	pods, nodes []string
}

// runPair applies a workload's manifest and waits until its two pods
// (label selector sel) run on two different nodes; owner's end deletes it.
// It logs creation to Ready of each pod from the API's timestamps.
func runPair(t *testing.T, owner testing.TB, cp *controlPlane, manifest, sel string) pair {
	t.Helper()
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods", manifest)
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	owner.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	out := cp.poll(t, 20*time.Minute, func(s string) bool { return strings.Count(s, " True ") == 2 },
		"get", "pods", "-l", sel, "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.nodeName} {.metadata.creationTimestamp} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}`)
	var p pair
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 5 {
			continue
		}
		p.pods, p.nodes = append(p.pods, f[0]), append(p.nodes, f[2])
		created, err1 := time.Parse(time.RFC3339, f[3])
		ready, err2 := time.Parse(time.RFC3339, f[4])
		if err1 == nil && err2 == nil {
			t.Logf("CLUSTER-TIME pod %s on %s: created to Ready %.0f s (API timestamps)", f[0], f[2], ready.Sub(created).Seconds())
		}
	}
	if len(p.pods) != 2 || p.nodes[0] == p.nodes[1] {
		t.Fatalf("want two pods of %s on two nodes: %q", sel, out)
	}
	return p
}

// exec runs a command in a pod's only container through `kubectl exec`.
// An exec the runtime could not start (containerd under TCG answers "failed
// to load task: context deadline exceeded" when the node is busy) is tried
// again, up to three times; a command that ran and failed is not.
func (cp *controlPlane) exec(pod string, args ...string) (string, error) {
	return cp.execIn([]string{pod}, args...)
}

// execIn is exec with kubectl exec's own arguments before "--" (namespace,
// pod, container).
func (cp *controlPlane) execIn(target []string, args ...string) (string, error) {
	var out string
	var err error
	for try := 0; try < 3; try++ {
		out, err = cp.kubectlOut(append(append(append([]string{"exec"}, target...), "--"), args...)...)
		if err == nil || strings.Contains(out, "command terminated with exit code") {
			return out, err
		}
		time.Sleep(5 * time.Second)
	}
	return out, err
}

// execBackground starts `kubectl ARGS` (a server run by kubectl exec) and
// returns what stops it: it kills the local kubectl, waits for it and
// returns its output, whole once it is gone; it may be called again. A
// kubectl that did not start stops with its error as its output.
func (cp *controlPlane) execBackground(args ...string) (stop func() string) {
	var out bytes.Buffer
	cmd := exec.Command(cp.kubectl, append([]string{"--kubeconfig", cp.admin}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return func() string { return err.Error() }
	}
	stopped, start := false, time.Now()
	return func() string {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			cp.runs.count(args, time.Since(start))
			stopped = true
		}
		return out.String()
	}
}

// counter reads one integer: a sysfs file, or a /proc/net/snmp6 field.
func (cp *controlPlane) counter(t *testing.T, pod, file, field string) int {
	t.Helper()
	out, err := cp.exec(pod, "/bin/busybox", "cat", file)
	if err != nil {
		t.Fatalf("%s: cat %s: %v: %s", pod, file, err, out)
	}
	if field != "" {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == field {
				out = f[1]
			}
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("%s: %s %s: %q", pod, file, field, out)
	}
	return n
}

// rping runs an rping server in one pod and a client in another for 10
// pings to addr; it reports whether all 10 came back, the client's output
// and how long the client took. The client starts once the server
// listens. The server (without -P) serves one connection: a try after one
// that reached it fails too, so further tries only cover a client that
// never reached the server; tries is how many the caller allows (one where
// failure is the expected outcome, each costing the client's 20 s).
func (cp *controlPlane) rping(server, client, addr string, tries int) (bool, string, time.Duration) {
	stop := cp.execBackground("exec", server, "--",
		"/bin/busybox", "timeout", "120", "/usr/bin/rping", "-s", "-a", addr, "-C", "10")
	defer stop()
	listening := false
	for deadline := time.Now().Add(30 * time.Second); !listening && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		out, err := cp.exec(server, "/usr/sbin/rdma", "resource", "show", "cm_id")
		listening = err == nil && rpingListening(out, addr)
	}
	var out string
	var took time.Duration
	for try := 0; try < tries; try++ {
		if try > 0 {
			time.Sleep(2 * time.Second)
		}
		start := time.Now()
		o, err := cp.exec(client, "/bin/busybox", "timeout", "20", "/usr/bin/rping", "-c", "-a", addr, "-C", "10", "-v")
		out, took = o, time.Since(start)
		if rpingDone(o, err, 10) {
			return true, o, took
		}
	}
	if !listening {
		out = "(the server was not seen listening within 30 s)\n" + out
	}
	return false, out, took
}

// rpingListening reports whether `rdma resource show cm_id` lists a
// cm_id in state LISTEN on addr (iproute2 prints "src-addr ADDR:PORT").
func rpingListening(out, addr string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " state LISTEN ") && strings.Contains(line, " src-addr "+addr+":") {
			return true
		}
	}
	return false
}

// rpingDone reports whether an rping client's output (with -v) shows count
// verified pings, each a "ping data" line. Exit code 255 after exactly
// "rdma_get_cm_event: Bad file descriptor" is rping's own teardown race
// (integration/vm/scenarios/lib.sh, rping_done, says which) and counts as
// done when the pings are all there; any other failure does not.
func rpingDone(out string, err error, count int) bool {
	if strings.Count(out, "ping data") != count {
		return false
	}
	if err == nil {
		return true
	}
	if !strings.Contains(out, "command terminated with exit code 255") {
		return false
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "rdma_get_cm_event: Bad file descriptor" {
			return true
		}
	}
	return false
}

const rxe = "/sys/class/infiniband/rxe0/ports/1"

// testHostNetwork checks that the GDR StatefulSet (hostNetwork,
// aliyun/erdma) runs on both nodes with no attachment recorded for it
// (kubelet never calls CNI for it), and rping between the nodes' own
// addresses on the RDMA network is the host-to-host figure. Its pods stay
// until owner ends, for the scenarios after it: they read the nodes' RDMA
// counters.
func testHostNetwork(t *testing.T, owner testing.TB, cp *controlPlane) pair {
	p := runPair(t, owner, cp, "gdr-statefulset.yaml", "app=nccltest")
	for i, pod := range p.pods {
		ds, err := cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app=rdma-chain",
			"--field-selector", "spec.nodeName="+p.nodes[i], "-o", "name")
		if err != nil || ds == "" {
			t.Fatalf("rdma-chain pod of %s: %v: %s", p.nodes[i], err, ds)
		}
		out, err := cp.execIn([]string{"-n", "kube-system", ds, "-c", "reconcile"}, "/rdma-chain-ops", "inspect", "--json")
		if err != nil {
			t.Fatalf("inspect on %s: %v: %s", p.nodes[i], err, out)
		}
		if strings.Contains(out, pod) {
			t.Errorf("hostNetwork pod %s on %s has an attachment: %s", pod, p.nodes[i], out)
		}
	}
	addr := nodeRDMAAddr(p.nodes[0])
	before := cp.counter(t, p.pods[0], rxe+"/hw_counters/rcvd_pkts", "")
	ok, out, took := cp.rping(p.pods[0], p.pods[1], addr, 3)
	if !ok {
		t.Fatalf("host-to-host rping %s -> %s: %s", p.nodes[1], addr, out)
	}
	rcvd := cp.counter(t, p.pods[0], rxe+"/hw_counters/rcvd_pkts", "") - before
	t.Logf("CLUSTER-FIGURE rping host-to-host %s -> %s [%s]: 10 pings in %.2f s; %s's rxe0 received %d RoCE packets",
		p.nodes[1], p.nodes[0], addr, took.Seconds(), p.nodes[0], rcvd)
	if rcvd <= 0 {
		t.Errorf("%s's rxe0 counted no received packets", p.nodes[0])
	}
	return p
}

// nodeRDMAAddr is a node's own address on the RDMA network
// (integration/cluster/guest/init.sh: fd00:10:IDX::1 on eth1).
func nodeRDMAAddr(node string) string {
	for i, n := range nodeNames {
		if n == node {
			return fmt.Sprintf("fd00:10:%d::1", i+1)
		}
	}
	return ""
}

// hostPod is the hostNetwork pod on node, for its node's counters.
func (p pair) hostPod(node string) string {
	for i, n := range p.nodes {
		if n == node {
			return p.pods[i]
		}
	}
	return ""
}

// testCrossNode checks that the Lingjun Job (two pods, rdma/hca: 1,
// anti-affinity) runs one pod per node; each container has rdma0 with a
// global IPv6 address from its node's /64, which its node's RDMA device
// holds as a RoCE GID; the pods reach each other over rdma0 across the
// nodes. RoCE between them is tried with rping through `kubectl exec` as a
// user would. The pods stay for the caller's next scenario (the
// DaemonSet's rollout); t's end deletes them.
func testCrossNode(t *testing.T, cp *controlPlane, hosts pair) pair {
	start := time.Now()
	p := runPair(t, t, cp, "lingjun-job.yaml", "app=lingjun-rping")
	t.Logf("CLUSTER-TIME lingjun-rping: both pods Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	addrs := make([]string, 2)
	for i, pod := range p.pods {
		addrs[i] = podRDMAAddr(t, cp, pod)
		// Unused GID entries answer EINVAL: cat's status says nothing.
		gids, err := cp.exec(hosts.hostPod(p.nodes[i]), "/bin/busybox", "sh", "-c", "cat "+rxe+"/gids/* 2>/dev/null; true")
		if err != nil {
			t.Fatalf("GIDs of %s: %v: %s", p.nodes[i], err, gids)
		}
		if !strings.Contains(gids, expandIPv6(addrs[i])) {
			t.Errorf("%s's rxe0 has no GID for %s's address %s", p.nodes[i], pod, addrs[i])
		}
		t.Logf("%s on %s: rdma0 %s, a GID of %s's rxe0", pod, p.nodes[i], addrs[i], p.nodes[i])
	}
	out, err := cp.exec(p.pods[1], "/bin/busybox", "ping", "-6", "-c", "3", "-W", "5", addrs[0])
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Fatalf("ping %s -> %s over rdma0: %v: %s", p.pods[1], addrs[0], err, out)
	}
	t.Logf("ping %s (%s) -> %s (%s) over rdma0: %s", p.pods[1], p.nodes[1], p.pods[0], p.nodes[0], lastLine(out))

	sent0 := cp.counter(t, hosts.hostPod(p.nodes[1]), rxe+"/hw_counters/sent_pkts", "")
	csum0 := cp.counter(t, p.pods[0], "/proc/net/snmp6", "Udp6InCsumErrors")
	ok, out, took := cp.rping(p.pods[0], p.pods[1], addrs[0], 1)
	sent := cp.counter(t, hosts.hostPod(p.nodes[1]), rxe+"/hw_counters/sent_pkts", "") - sent0
	csum := cp.counter(t, p.pods[0], "/proc/net/snmp6", "Udp6InCsumErrors") - csum0
	if ok {
		t.Logf("CLUSTER-FIGURE rping pod-to-pod %s -> %s [%s]: 10 pings in %.2f s", p.nodes[1], p.nodes[0], addrs[0], took.Seconds())
		return p
	}
	// Soft-RoCE receives RoCE on a UDP socket of its netdev's netns; the
	// ipvlan parent hands a frame for a child's address to the child, so a
	// RoCE frame for a pod's address from another node lands in the pod's
	// netns, where no socket takes it (its zero UDP checksum is what the
	// pod's UDP counts). A hardware port matches GIDs before the netdev.
	if sent <= 0 || csum <= 0 {
		t.Fatalf("rping %s -> %s failed and the soft-RoCE evidence is missing (%s's rxe0 sent %d, %s's netns Udp6InCsumErrors +%d): %s",
			p.pods[1], addrs[0], p.nodes[1], sent, p.pods[0], csum, out)
	}
	t.Logf("CLUSTER-LIMIT rping pod-to-pod across nodes: soft-RoCE cannot receive for an ipvlan child's address: %s's rxe0 sent %d RoCE packets to %s, which arrived in %s's netns and were dropped there (Udp6InCsumErrors +%d)",
		p.nodes[1], sent, addrs[0], p.pods[0], csum)
	return p
}

// podRDMAAddr is the global IPv6 address on a pod's rdma0.
func podRDMAAddr(t *testing.T, cp *controlPlane, pod string) string {
	t.Helper()
	out, err := cp.exec(pod, "/usr/sbin/ip", "-6", "-o", "addr", "show", "dev", "rdma0", "scope", "global")
	if err != nil {
		t.Fatalf("%s: ip addr: %v: %s", pod, err, out)
	}
	f := strings.Fields(out)
	for j := range f {
		if f[j] == "inet6" && j+1 < len(f) {
			a, _, _ := strings.Cut(f[j+1], "/")
			return a
		}
	}
	t.Fatalf("%s: no global IPv6 on rdma0: %s", pod, out)
	return ""
}

// expandIPv6 writes an address as sysfs writes a GID: eight groups of four
// hex digits.
func expandIPv6(a string) string {
	ip := net.ParseIP(a).To16()
	if ip == nil {
		return a
	}
	var g []string
	for i := 0; i < 16; i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", ip[i], ip[i+1]))
	}
	return strings.Join(g, ":")
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
