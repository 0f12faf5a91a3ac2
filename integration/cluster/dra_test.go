//go:build cluster

package cluster

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// claimStatus prints a claim's status.devices: driver, device, interface,
// addresses, MAC and the Ready condition.
const claimStatus = `jsonpath={range .status.devices[*]}{.driver} {.device} {.networkData.interfaceName} {.networkData.ips} {.networkData.hardwareAddress} {.conditions[?(@.type=="Ready")].status} {.conditions[?(@.type=="Ready")].reason}{end}`

// testDRA checks that the DRA driver of deploy/dra publishes each node's
// RDMA NICs in a ResourceSlice; that a pod whose claim asks the driver's
// DeviceClass for simrdma0 is scheduled from it and gets rdma0 from the
// plugin (which learns the claim from kubelet's pod-resources); and that
// the driver writes rdma0 into the claim's status (networkData, Ready).
// Deleting the pod deletes its claim.
func testDRA(t *testing.T, cp *controlPlane) {
	for _, n := range nodeNames {
		out := cp.poll(t, 5*time.Minute, func(s string) bool { return strings.Contains(s, "simrdma0") },
			"get", "resourceslices", "--field-selector", "spec.nodeName="+n, "-o",
			`jsonpath={range .items[*]}{.spec.driver} {.spec.pool.name}: {range .spec.devices[*]}{.name} {end}{"\n"}{end}`)
		t.Logf("ResourceSlice of %s: %s", n, out)
	}
	// The character devices of simrdma0 on each node, read from sysfs
	// before any pod holds the device: its uverbs, its umad/issm pairs
	// (each names its device in ibdev), and rdma_cm.
	devs := map[string][]string{}
	for _, n := range nodeNames {
		devs[n] = charDevices(t, cp, n, "simrdma0")
	}
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-pod.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	cp.podBecomesReady(t, "dra-trainer", 10*time.Minute)
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
		claimStatus)
	t.Logf("claim %s: allocated %s; pod rdma0 %s %s; status.devices: %s", claim, alloc, addr, mac, status)
	if !strings.Contains(status, addr) || !strings.Contains(status, strings.TrimSpace(mac)) {
		t.Errorf("claim %s status %q lacks the pod's rdma0 address %s or MAC %s", claim, status, addr, mac)
	}
	assertCharDevices(t, cp, "dra-trainer", devs[node])
	draRestart(t, cp, node, claim, status)
	assertCharDevices(t, cp, "dra-trainer", devs[node])
	if out, err := cp.kubectlOut("delete", "pod", "dra-trainer", "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "" }, "get", "resourceclaims", "-o", "name")
}

// charDevices lists the character devices of the RDMA device dev on node,
// read from sysfs while no pod holds it: its uverbs, its umad/issm pairs
// (each names its device in ibdev), and rdma_cm; sorted.
func charDevices(t *testing.T, cp *controlPlane, node, dev string) []string {
	t.Helper()
	out := strings.Fields(cp.nodeShell(t, node, `cd /sys/class
for c in infiniband_verbs/* infiniband_mad/*; do [ "$(cat "$c/ibdev" 2>/dev/null)" = `+dev+` ] && echo "${c#*/}"; done
[ -e misc/rdma_cm ] && echo rdma_cm; true`))
	slices.Sort(out)
	return out
}

// assertCharDevices checks that pod's /dev/infiniband holds exactly
// want (its device's uverbs and umad/issm, rdma_cm), nothing of other
// devices.
func assertCharDevices(t *testing.T, cp *controlPlane, pod string, want []string) {
	t.Helper()
	out, err := cp.exec(pod, "/bin/busybox", "ls", "/dev/infiniband")
	got := strings.Fields(out)
	slices.Sort(got)
	t.Logf("%s /dev/infiniband: %v (its device's on the node: %v)", pod, got, want)
	if err != nil || !slices.Equal(got, want) || !slices.ContainsFunc(want, func(d string) bool { return strings.HasPrefix(d, "uverbs") }) {
		t.Errorf("%s's /dev/infiniband = %v (%v), want exactly %v with a uverbs device", pod, got, err, want)
	}
}

// draRestart deletes the DRA driver's pod on node while dra-trainer runs;
// once its DaemonSet's new pod is Ready and has published the node's
// slice again, the pod is still Ready and the claim's status unchanged.
func draRestart(t *testing.T, cp *controlPlane, node, claim, status string) {
	t.Helper()
	selector := []string{"-n", "kube-system", "get", "pods", "-l", "app=rdma-chain-dra", "--field-selector", "spec.nodeName=" + node}
	old, err := cp.kubectlOut(append(selector, "-o", "jsonpath={.items[0].metadata.name}")...)
	if err != nil || old == "" {
		t.Fatalf("the DRA driver's pod on %s: %v: %s", node, err, old)
	}
	start := time.Now()
	if out, err := cp.kubectlOut("-n", "kube-system", "delete", "pod", old, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete %s: %v: %s", old, err, out)
	}
	cp.poll(t, 5*time.Minute, func(s string) bool { n, ready, _ := strings.Cut(s, " "); return n != "" && n != old && ready == "True" },
		append(selector, "-o", `jsonpath={.items[0].metadata.name} {.items[0].status.conditions[?(@.type=="Ready")].status}`)...)
	cp.poll(t, 3*time.Minute, func(s string) bool { return strings.Contains(s, "simrdma0") },
		"get", "resourceslices", "--field-selector", "spec.nodeName="+node, "-o", `jsonpath={.items[*].spec.devices[*].name}`)
	t.Logf("CLUSTER-TIME DRA driver on %s back and its slice published %.1f s after its pod's deletion", node, time.Since(start).Seconds())
	if ready, _ := cp.kubectlOut("get", "pod", "dra-trainer", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
		t.Errorf("dra-trainer Ready = %q after the driver's restart", ready)
	}
	after, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		claimStatus)
	if after != status {
		t.Errorf("claim %s status after the driver's restart:\n%s\nbefore:\n%s", claim, after, status)
	}
}
