//go:build cluster

package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testGPUNIC checks the alignment of a GPU and an RDMA NIC by PCIe root on
// the real scheduler (docs/dra.md, "A GPU and a NIC under one PCIe root"),
// with a test-only GPU DRA driver: integration/cluster/fakegpu, a kubelet
// plugin on node-b (pods/gpu-driver.yaml), its image built and pushed to
// the tier's registry, its slice in pods/gpu-nic.yaml. gpu-nic-20's claim,
// a GPU under pci0000:20 and an rdma-chain NIC with matchAttribute
// resource.kubernetes.io/pcieRoot, gets gpu-1 and simrdma1 (node-b's other
// NIC, simrdma0, is under pci0000:00), and the pod runs with rdma0;
// gpu-nic-40's, whose GPU's root has no NIC, stays Pending with the
// scheduler's reason. Deleted, they leave no record on node-b.
func testGPUNIC(t *testing.T, cp *controlPlane) {
	node := twoRootNode
	root := testenv.RepoRoot()
	tmpl, err := os.ReadFile(filepath.Join(root, "integration/cluster/pods/gpu-driver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(cp.dir, "gpu-driver.yaml")
	if err := os.WriteFile(driver, []byte(strings.ReplaceAll(string(tmpl), "FAKEGPU_IMAGE", cp.pushFakeGPU(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.kubectlOut("apply", "-f", driver); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", driver, "--wait=false") })
	cp.poll(t, 5*time.Minute, func(s string) bool { return s == "True" },
		"-n", "kube-system", "get", "pod", "fake-gpu", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	path := filepath.Join(root, "integration/cluster/pods/gpu-nic.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	// Before the driver goes (cleanups run last first): kubelet needs it
	// to unprepare the GPU of a pod being deleted.
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m") })
	sched := cp.unschedulable(t, "gpu-nic-40")
	t.Logf("gpu-nic-40 (a GPU under a root without a NIC): %s", sched)
	if !strings.Contains(sched, "cannot allocate all claims") {
		t.Errorf("gpu-nic-40 unschedulable for another reason than its claim: %s", sched)
	}
	cp.podBecomesReady(t, "gpu-nic-20", 5*time.Minute)
	t.Logf("CLUSTER-TIME gpu-nic-20 Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	claim, _ := cp.kubectlOut("get", "pod", "gpu-nic-20", "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
	alloc, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		`jsonpath={range .status.allocation.devices.results[*]}{.request}={.driver}/{.pool}/{.device} {end}`)
	on, _ := cp.kubectlOut("get", "pod", "gpu-nic-20", "-o", `jsonpath={.spec.nodeName}`)
	t.Logf("gpu-nic-20 on %s: claim %s allocated %s", on, claim, alloc)
	if want := "gpu=gpu.example.com/" + node + "/gpu-1 rdma=rdma-chain.github.io/" + node + "/simrdma1"; strings.TrimSpace(alloc) != want || on != node {
		t.Errorf("gpu-nic-20 on %s with %q, want %s with %q", on, alloc, node, want)
	}
	cp.requireRDMA0(t, node, "gpu-nic-20")
	if out, err := cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		left := cp.nodeShell(t, node, `grep -l '"gpu-nic-20"' /host/var/lib/cni/rdma-chain/attachments/*.json 2>/dev/null; true`)
		return left == "", "gpu-nic-20's record is left on " + node + ": " + left
	})
}
