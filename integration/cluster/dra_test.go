//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testDRA: the DRA driver of deploy/dra publishes each node's RDMA NICs in
// a ResourceSlice; a pod whose claim asks the driver's DeviceClass for
// simrdma0 is scheduled from it, gets rdma0 from the plugin (which learns
// the claim from kubelet's pod-resources), and the driver writes rdma0 into
// the claim's status (networkData, Ready). Deleting the pod deletes its
// claim.
func testDRA(t *testing.T, cp *controlPlane) {
	for _, n := range nodeNames {
		out := cp.poll(t, 5*time.Minute, func(s string) bool { return strings.Contains(s, "simrdma0") },
			"get", "resourceslices", "--field-selector", "spec.nodeName="+n, "-o",
			`jsonpath={range .items[*]}{.spec.driver} {.spec.pool.name}: {range .spec.devices[*]}{.name} {end}{"\n"}{end}`)
		t.Logf("ResourceSlice of %s: %s", n, out)
	}
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-pod.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	cp.poll(t, 10*time.Minute, func(s string) bool { return s == "True" },
		"get", "pod", "dra-trainer", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("CLUSTER-TIME dra-trainer: Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	claim, err := cp.kubectlOut("get", "pod", "dra-trainer", "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
	if err != nil || claim == "" {
		t.Fatalf("dra-trainer has no claim: %v: %s", err, claim)
	}
	alloc, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		`jsonpath={range .status.allocation.devices.results[*]}{.driver} {.pool} {.device}{end}`)
	node, _ := cp.kubectlOut("get", "pod", "dra-trainer", "-o", `jsonpath={.spec.nodeName}`)
	if alloc != "rdma-chain.github.io "+node+" simrdma0" {
		t.Errorf("claim %s allocated %q, want simrdma0 of %s from rdma-chain.github.io", claim, alloc, node)
	}
	addr := podRDMAAddr(t, cp, "dra-trainer")
	mac, _ := cp.exec("dra-trainer", "/bin/busybox", "cat", "/sys/class/net/rdma0/address")
	status := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "rdma0") && strings.Contains(s, "True") },
		"get", "resourceclaim", claim, "-o",
		`jsonpath={range .status.devices[*]}{.driver} {.device} {.networkData.interfaceName} {.networkData.ips} {.networkData.hardwareAddress} {.conditions[?(@.type=="Ready")].status} {.conditions[?(@.type=="Ready")].reason}{end}`)
	t.Logf("claim %s: allocated %s; pod rdma0 %s %s; status.devices: %s", claim, alloc, addr, mac, status)
	if !strings.Contains(status, addr) || !strings.Contains(status, strings.TrimSpace(mac)) {
		t.Errorf("claim %s status %q lacks the pod's rdma0 address %s or MAC %s", claim, status, addr, mac)
	}
	if out, err := cp.kubectlOut("delete", "pod", "dra-trainer", "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "" }, "get", "resourceclaims", "-o", "name")
}
