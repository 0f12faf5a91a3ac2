//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/inspect"
)

// rebootPods are pods/reboot.yaml's: SMC-R and shared-mode (each a
// StatefulSet's pod) and DRA.
var rebootPods = []string{rebootSMCR, "reboot-shared-0", "reboot-dra"}

// rebootSMCR is the SMC-R pod of pods/reboot.yaml.
const rebootSMCR = "reboot-smcr-0"

// testReboot resets node-a (diskNode: its /var/lib, with rdma-chain's
// records and the IPAM leases, is on its disk) while an SMC-R pod, a
// shared-mode RDMA pod and a DRA pod run on it. The reset loses every pod
// netns, the bpffs pins and the SMC socket hook, and the kernel may hand
// out the old netns inodes again. After the boot kubelet gives the DRA pod
// a new sandbox, and each StatefulSet replaces a device-plugin pod that
// kubelet failed at admission (see pods/reboot.yaml). Then:
//   - every record of the earlier boot is gone (released by the runtime's
//     DEL of the dead sandbox or by reconcile's first pass, whichever came
//     first), and no DEL of an old sandbox failed;
//   - the pods hold as many leases as before the reset: the old ones went,
//     and no release of an old record took a new pod's;
//   - the new SMC-R pod's netns is listed in the hook once, and its TCP
//     sockets are SMC: its netns's SMC fallback counter moves when it
//     connects over loopback, which SMC cannot carry;
//   - deleted, the pods leave the node as it was before them.
//
// Printed: the time from qemu's start to the last old record gone.
func testReboot(t *testing.T, owner testing.TB, cp *controlPlane, vm *nodeVM) {
	node := vm.name
	cp.nodeQuiet(t, node)
	before := cp.nodeShell(t, node, nodeStateScript)
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/reboot.yaml")
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	for _, pod := range rebootPods {
		cp.podBecomesReady(t, pod, 10*time.Minute)
		cp.requireRDMA0(t, node, pod)
	}
	all, err := cp.attachments(node)
	if err != nil {
		t.Fatal(err)
	}
	old := byPod(all)
	for _, pod := range rebootPods {
		if _, ok := old[pod]; !ok {
			t.Fatalf("inspect on %s lists no attachment of %s: %v", node, pod, old)
		}
	}
	held := cp.nodeShell(t, node, nodeStateScript)
	t.Logf("%s with the pods, against before them:\n%s", node, diffLines(before, held))

	vm.powerOff(t)
	reset := time.Now()
	vm.start(t, owner)
	vm.waitReady(t, 20*time.Minute)
	cp.poll(t, 10*time.Minute, func(s string) bool { return s == "True" },
		"get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("CLUSTER-TIME %s: Ready in the API %.1f s after its reset (qemu start to kubelet running %.1f s)",
		node, time.Since(reset).Seconds(), vm.ready.Seconds())
	cp.pollFunc(t, 10*time.Minute, func() (bool, string) {
		out, err := cp.nodeExec(t, node, "true")
		return err == nil, fmt.Sprintf("the shell pod on %s: %v: %s", node, err, out)
	})

	now := cp.rebootSettled(t, node, old, reset)
	for _, pod := range rebootPods {
		cp.podBecomesReady(t, pod, 10*time.Minute)
		cp.requireRDMA0(t, node, pod)
	}
	after := cp.nodeShell(t, node, nodeStateScript)
	if a, b := countPrefix(held, "lease "), countPrefix(after, "lease "); a != b {
		t.Errorf("%s holds %d leases after the reboot, %d before it:\n%s", node, b, a, diffLines(held, after))
	}
	cp.oldDELsSucceeded(t, node, old)
	smcAfterReboot(t, cp, node, now[rebootSMCR])

	start := time.Now()
	if out, err := cp.kubectlOut("delete", "-f", path, "--cascade=foreground", "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	cp.nodeAsBefore(t, node, before, start, "the pods' delete began")
}

// rebootSettled waits until inspect on node lists a new attachment of
// every reboot pod and none of old's, and prints when the last old one
// went, from reset (seconds since qemu started again). It returns the new
// attachments by pod.
func (cp *controlPlane) rebootSettled(t *testing.T, node string, old map[string]inspect.Attachment, reset time.Time) map[string]inspect.Attachment {
	t.Helper()
	var now map[string]inspect.Attachment
	oldGone := time.Duration(0)
	cp.pollFunc(t, 10*time.Minute, func() (bool, string) {
		all, err := cp.attachments(node)
		if err != nil {
			return false, err.Error()
		}
		now = byPod(all)
		var left, waiting []string
		ids := map[string]bool{}
		for _, a := range all {
			ids[a.ContainerID] = true
		}
		for pod, a := range old {
			if ids[a.ContainerID] {
				left = append(left, pod+" "+a.ContainerID)
			}
		}
		if len(left) == 0 && oldGone == 0 {
			oldGone = time.Since(reset)
		}
		for _, pod := range rebootPods {
			if a, ok := now[pod]; !ok || a.ContainerID == old[pod].ContainerID {
				waiting = append(waiting, pod)
			}
		}
		var phases []string
		for _, pod := range waiting {
			out, _ := cp.kubectlOut("get", "pod", pod, "-o", `jsonpath={.status.phase} {.status.reason} {.status.message}`)
			phases = append(phases, pod+": "+strings.TrimSpace(out))
		}
		return len(left) == 0 && len(waiting) == 0,
			fmt.Sprintf("old attachments left: %v; pods without a new one: %v", left, phases)
	})
	t.Logf("CLUSTER-TIME %s: the last record of the earlier boot gone %.1f s after qemu started again (read by polling inspect)",
		node, oldGone.Seconds())
	rec, _ := cp.kubectlOut("-n", "kube-system", "logs", cp.dsPod(t, node), "-c", "reconcile")
	for _, l := range strings.Split(rec, "\n") {
		if strings.Contains(l, "an earlier boot") {
			t.Logf("reconcile on %s: %s", node, l)
		}
	}
	for _, pod := range rebootPods {
		if a := now[pod]; !a.Healthy {
			t.Errorf("%s's new attachment on %s is not healthy: %v", pod, node, a.Problems)
		}
	}
	return now
}

// oldDELsSucceeded fails t when the plugin's log on node holds a failed
// DEL of one of old's sandboxes, and prints the calls it holds for them.
func (cp *controlPlane) oldDELsSucceeded(t *testing.T, node string, old map[string]inspect.Attachment) {
	t.Helper()
	var ids []string
	for _, a := range old {
		ids = append(ids, a.ContainerID)
	}
	slices.Sort(ids)
	log := cp.nodeShell(t, node, `grep -E "container=(`+strings.Join(ids, "|")+`) " /host/var/log/rdma-chain.log | grep -E 'msg=(done|failed)' | grep -v 'verb=ADD'; true`)
	t.Logf("%s: the plugin's closing lines for the old sandboxes (ADD left out):\n%s", node, log)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "verb=DEL") && !strings.Contains(l, "outcome=ok") {
			t.Errorf("a DEL of an old sandbox failed: %s", l)
		}
	}
}

// smcAfterReboot checks that the new SMC-R pod's netns is listed in
// node's SMC socket hook exactly once, and a TCP connection made in it
// over loopback moves the netns's SMC fallback counter: the socket was
// SMC.
func smcAfterReboot(t *testing.T, cp *controlPlane, node string, a inspect.Attachment) {
	t.Helper()
	out, err := cp.exec(rebootSMCR, "/bin/busybox", "readlink", "/proc/1/ns/net")
	m := netnsInode.FindStringSubmatch(strings.TrimSpace(out))
	if err != nil || m == nil {
		t.Fatalf("%s's netns: %v: %q", rebootSMCR, err, out)
	}
	hook := cp.nodeShell(t, node, hookState)
	listed := strings.Count("\n"+hook+"\n", "\n"+m[1]+"\n")
	t.Logf("%s's SMC socket hook after the reboot (reboot-smcr's netns inode %s):\n%s", node, m[1], hook)
	if !hookHeld(hook) || listed != 1 {
		t.Errorf("want the hook attached and held with reboot-smcr's netns %s listed once; listed %d times", m[1], listed)
	}
	before := cp.smcFallbacks(t, node, a.NetNS)
	conn, err := cp.exec(rebootSMCR, "/bin/busybox", "sh", "-c",
		`/bin/busybox nc -l -p 7001 >/dev/null 2>&1 & sleep 1; echo smc | /bin/busybox nc -w 2 127.0.0.1 7001; kill $! 2>/dev/null; true`)
	after := cp.smcFallbacks(t, node, a.NetNS)
	t.Logf("reboot-smcr: SMC fallbacks %d before a loopback TCP connection, %d after (%v: %s)", before, after, err, conn)
	if after <= before {
		t.Errorf("reboot-smcr's TCP connection did not move its netns's SMC fallback counter: its sockets are not SMC")
	}
}

// smcFallbacks is the SMC fallbacks (client and server) of the netns at
// nsPath as inspect in node's DaemonSet pod reads them.
func (cp *controlPlane) smcFallbacks(t *testing.T, node, nsPath string) uint64 {
	t.Helper()
	out, err := cp.execIn([]string{"-n", "kube-system", cp.dsPod(t, node), "-c", "reconcile"}, "/rdma-chain-ops", "inspect", "--netns", nsPath, "--json")
	var r inspect.Report
	if err == nil {
		err = json.Unmarshal([]byte(out), &r)
	}
	if err != nil || r.Netns == nil || r.Netns.Fallbacks == nil {
		t.Fatalf("inspect --netns %s on %s: %v: %s", nsPath, node, err, out)
	}
	return r.Netns.Fallbacks.ClientTotal + r.Netns.Fallbacks.ServerTotal
}

// attachments is inspect's attachments on node, read in its DaemonSet
// pod's reconcile container.
func (cp *controlPlane) attachments(node string) ([]inspect.Attachment, error) {
	pod, err := cp.kubectlOut("-n", "kube-system", "get", "pods", "-l", "app=rdma-chain",
		"--field-selector", "spec.nodeName="+node, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return nil, fmt.Errorf("the DaemonSet's pod on %s: %w: %s", node, err, pod)
	}
	if pod == "" || strings.Contains(pod, " ") {
		return nil, fmt.Errorf("the DaemonSet's pods on %s: %q, want one", node, pod)
	}
	out, err := cp.execIn([]string{"-n", "kube-system", pod, "-c", "reconcile"}, "/rdma-chain-ops", "inspect", "--json")
	var r inspect.Report
	if err == nil {
		err = json.Unmarshal([]byte(out), &r)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect on %s: %w: %s", node, err, out)
	}
	return r.Attachments, nil
}

// byPod maps the attachments of pods in namespace default by pod name.
func byPod(all []inspect.Attachment) map[string]inspect.Attachment {
	m := map[string]inspect.Attachment{}
	for _, a := range all {
		if name, ok := strings.CutPrefix(a.Pod, "default/"); ok {
			m[name] = a
		}
	}
	return m
}

func countPrefix(s, prefix string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
