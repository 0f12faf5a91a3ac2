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
)

// outOfService is the taint the Kubernetes docs tell an operator to put
// on a node that was shut down without its kubelet knowing (non-graceful
// node shutdown, GA since 1.28): the pods on it are deleted at once and
// run again elsewhere. The operator removes it once the node is back.
const outOfService = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"

// testNodeLoss cuts the power of a node with RDMA pods on it (its qemu is
// killed). Once the API says the node is not Ready, the operator taints it
// out of service and the Deployment's pods run again, with RDMA, on the
// other node; the node boots again from its disk (diskNode), and nothing
// of the lost pods is left on it: attachment records, both networks'
// leases, links, addresses and GIDs are as before the Deployment. Who
// released them (the runtime's DEL of the dead sandboxes, reconcile) is
// printed from the node's plugin log and reconcile's.
//
// The other node is busy with its own scenarios until otherFree closes:
// the lost pods' replacements are kept off it until then (the taint comes
// after), while the wait for the API to notice the loss runs beside them.
func testNodeLoss(t *testing.T, owner testing.TB, cp *controlPlane, vm *nodeVM, other string, otherFree <-chan struct{}) {
	node := vm.name
	cp.nodeQuiet(t, node)
	before := cp.nodeShell(t, node, nodeStateScript)
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/node-loss.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	lost := cp.survivors(t, "on "+node, func(p podItem) bool { return p.Spec.NodeName == node })
	t.Logf("CLUSTER-TIME survivor: %v Ready on %s %.1f s after kubectl apply", lost, node, time.Since(start).Seconds())
	for _, pod := range lost {
		cp.requireRDMA0(t, node, pod)
	}
	held := cp.nodeShell(t, node, nodeStateScript)
	t.Logf("%s with the Deployment's pods, against before them:\n%s", node, diffLines(before, held))

	vm.powerOff(t)
	off := time.Now()
	ready := cp.poll(t, 6*time.Minute, func(s string) bool { return s != "True" },
		"get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("CLUSTER-TIME %s: Ready %s in the API %.1f s after its power was cut", node, ready, time.Since(off).Seconds())
	select {
	case <-otherFree:
	case <-time.After(30 * time.Minute):
		t.Fatalf("%s's scenarios did not end within 30 minutes", other)
	}
	otherBefore := cp.nodeShell(t, other, nodeStateScript)
	if out, err := cp.kubectlOut("taint", "node", node, outOfService); err != nil {
		t.Fatalf("kubectl taint: %v: %s", err, out)
	}
	tainted := time.Now()
	vm.start(t, owner)
	moved := cp.survivors(t, "on "+other, func(p podItem) bool { return p.Spec.NodeName == other && !slices.Contains(lost, p.Metadata.Name) })
	t.Logf("CLUSTER-TIME survivor: %v Ready on %s %.1f s after the taint, %.1f s after the power cut", moved, other,
		time.Since(tainted).Seconds(), time.Since(off).Seconds())
	for _, pod := range moved {
		cp.requireRDMA0(t, other, pod)
	}
	// The Deployment goes while the node boots: its pods are the other
	// node's now, and so is what their deletes give back.
	start = time.Now()
	if out, err := cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	cp.pollFunc(t, 5*time.Minute, func() (bool, string) {
		ps := cp.survivorPods(t)
		return len(ps) == 0, fmt.Sprintf("survivor pods left: %d", len(ps))
	})
	cp.nodeAsBefore(t, other, otherBefore, start, "the Deployment's delete began")

	cp.nodeBack(t, vm, tainted)
	cp.nodeAsBefore(t, node, before, off, "its power was cut")
	cp.whoReleased(t, node, lost)
}

// nodeBack waits until the VM booted again is Ready in the API, takes the
// out-of-service taint off as the operator does, and waits until the
// node's shell runs again.
func (cp *controlPlane) nodeBack(t *testing.T, vm *nodeVM, tainted time.Time) {
	t.Helper()
	vm.waitReady(t, 20*time.Minute)
	cp.poll(t, 10*time.Minute, func(s string) bool { return s == "True" },
		"get", "node", vm.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("CLUSTER-TIME %s: booted again and Ready in the API %.1f s after the taint (qemu start to kubelet running %.1f s)",
		vm.name, time.Since(tainted).Seconds(), vm.ready.Seconds())
	if out, err := cp.kubectlOut("taint", "node", vm.name, outOfService+"-"); err != nil {
		t.Fatalf("kubectl taint -: %v: %s", err, out)
	}
	cp.pollFunc(t, 10*time.Minute, func() (bool, string) {
		out, err := cp.nodeExec(t, vm.name, "true")
		return err == nil, fmt.Sprintf("the shell pod on %s: %v: %s", vm.name, err, out)
	})
}

// survivors waits until the survivor Deployment has its 2 pods Ready,
// each where want says, and returns their names.
func (cp *controlPlane) survivors(t *testing.T, where string, want func(podItem) bool) []string {
	t.Helper()
	var names []string
	cp.pollFunc(t, 10*time.Minute, func() (bool, string) {
		names = nil
		var states []string
		for _, p := range cp.survivorPods(t) {
			states = append(states, p.Metadata.Name+": "+p.state())
			if status, _, _, _ := p.condition("Ready"); status == "True" && p.Metadata.DeletionTimestamp == nil && want(p) {
				names = append(names, p.Metadata.Name)
			}
		}
		return len(names) == 2 && len(states) == 2, fmt.Sprintf("survivor pods, want 2 Ready %s: %v", where, states)
	})
	slices.Sort(names)
	return names
}

func (cp *controlPlane) survivorPods(t *testing.T) []podItem {
	t.Helper()
	out, err := cp.kubectlOut("get", "pods", "-l", "app=survivor", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get pods: %v: %s", err, out)
	}
	var list struct{ Items []podItem }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	return list.Items
}

// nodeQuiet waits until node runs no pod of the pod network but
// DaemonSets' (the scenarios before left nothing being deleted there), so
// that a reading of its state is the node's own. Host-network pods (the
// GDR StatefulSet) change nothing the reading holds.
func (cp *controlPlane) nodeQuiet(t *testing.T, node string) {
	t.Helper()
	cp.pollFunc(t, 5*time.Minute, func() (bool, string) {
		out, err := cp.kubectlOut("get", "pods", "-A", "--field-selector", "spec.nodeName="+node, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var list struct{ Items []podItem }
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, err.Error()
		}
		var others []string
		for _, p := range list.Items {
			if c := p.controller(); !p.Spec.HostNetwork && (c == nil || c.Kind != "DaemonSet") {
				others = append(others, p.id())
			}
		}
		return len(others) == 0, fmt.Sprintf("pods on %s besides the DaemonSets' and host-network ones: %v", node, others)
	})
}

// whoReleased prints what the node's plugin log (kept on its disk) and
// reconcile say of the lost pods after the boot: the runtime's DEL of
// their dead sandboxes, reconcile's release of their records, or both.
func (cp *controlPlane) whoReleased(t *testing.T, node string, lost []string) {
	t.Helper()
	pods := strings.Join(lost, "|")
	log := cp.nodeShell(t, node, `f=/host/var/log/rdma-chain.log
ids=$(grep -E 'pod=default/(`+pods+`) ' $f | sed -n 's/.* container=\([^ ]*\).*/\1/p' | sort -u | tr '\n' '|')
grep -E "container=(${ids%|}) " $f | grep -v 'verb=ADD' | tail -n 20; true`)
	rec, _ := cp.kubectlOut("-n", "kube-system", "logs", cp.dsPod(t, node), "-c", "reconcile")
	var released []string
	for _, l := range strings.Split(rec, "\n") {
		if strings.Contains(l, "released an attachment") {
			released = append(released, l)
		}
	}
	t.Logf("%s after its boot: the plugin's lines for the lost pods' containers (ADD left out):\n%s\nreconcile's releases since its start:\n%s",
		node, strings.TrimSpace(log), strings.Join(released, "\n"))
}
