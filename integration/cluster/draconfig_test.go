//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// readyCondition is the driver's Ready condition of a claim: reason and
// message.
const readyCondition = `jsonpath={.status.devices[?(@.driver=="rdma-chain.github.io")].conditions[?(@.type=="Ready")].reason} {.status.devices[?(@.driver=="rdma-chain.github.io")].conditions[?(@.type=="Ready")].message}`

// testDRAConfig runs pods/dra-config.yaml on node-b: a claim whose
// opaque configuration names the pod's interface roce0 and turns its
// IPv6 off gets exactly that (the claim's status and the pod's netns
// say so); a configuration with an unknown field and one asking for
// SMC-R in the claim fail NodePrepareResources, so their pods do not
// start, and each claim's status and pod's events name the field. Then
// a namespace whose ResourceQuota allows no device of the SMC-R class
// cannot make a claim of it: the API server's quota decides who gets
// SMC-R through the class.
func testDRAConfig(t *testing.T, cp *controlPlane) {
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-config.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	cp.podBecomesReady(t, "dra-config", 5*time.Minute)
	claim := podClaim(t, cp, "dra-config")
	status := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, " True Attached") },
		"get", "resourceclaim", claim, "-o", claimStatus)
	t.Logf("CLUSTER-TIME dra-config Ready %.1f s after kubectl apply; claim %s: %s", time.Since(start).Seconds(), claim, status)
	if f := strings.Fields(status); len(f) < 3 || f[2] != "roce0" || strings.Contains(status, "fd00:") {
		t.Errorf("claim %s: want interface roce0 without IPv6 addresses: %s", claim, status)
	}
	out, err := cp.exec("dra-config", "/bin/busybox", "sh", "-c",
		"/usr/sbin/ip -o link show dev roce0 && /usr/sbin/ip -6 -o addr show dev roce0 scope global")
	t.Logf("dra-config's roce0: %v: %s", err, out)
	if err != nil || !strings.Contains(out, "roce0") || strings.Contains(out, "inet6") {
		t.Errorf("want roce0 in dra-config with no global IPv6 address")
	}
	for pod, field := range map[string]string{"dra-config-bad": `"ifname"`, "dra-config-smcr": `"smcr"`} {
		claim := podClaim(t, cp, pod)
		cond := cp.poll(t, 3*time.Minute, func(s string) bool { return strings.HasPrefix(s, "InvalidConfig ") },
			"get", "resourceclaim", claim, "-o", readyCondition)
		t.Logf("CLUSTER-TIME claim %s of %s: %.1f s after kubectl apply: %s", claim, pod, time.Since(start).Seconds(), cond)
		if !strings.Contains(cond, field) {
			t.Errorf("claim %s: want field %s named in its Ready condition", claim, field)
		}
		events := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, field) },
			"get", "events", "--field-selector", "involvedObject.name="+pod, "-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
		t.Logf("%s's events: %s", pod, events)
		phase, _ := cp.kubectlOut("get", "pod", pod, "-o", `jsonpath={.status.containerStatuses[0].state}`)
		if strings.Contains(phase, "running") {
			t.Errorf("pod %s runs despite its claim's configuration: %s", pod, phase)
		}
	}
	testSMCRQuota(t, cp)
}

// testSMCRQuota makes a namespace with a ResourceQuota of no device of
// the class smcr.rdma-chain.github.io and a claim of that class in it:
// the API server refuses the claim.
func testSMCRQuota(t *testing.T, cp *controlPlane) {
	const ns = "dra-no-smcr"
	manifest := `apiVersion: v1
kind: Namespace
metadata:
  name: ` + ns + `
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: no-smcr
  namespace: ` + ns + `
spec:
  hard:
    smcr.rdma-chain.github.io.deviceclass.resource.k8s.io/devices: "0"
`
	if out, err := cp.kubectlWith("", manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "namespace", ns, "--wait=false") })
	// The quota controller fills in status.used before admission counts
	// against the quota: wait for it.
	cp.poll(t, time.Minute, func(s string) bool { return s != "" },
		"-n", ns, "get", "resourcequota", "no-smcr", "-o", "jsonpath={.status.hard}")
	claim := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: smcr
  namespace: ` + ns + `
spec:
  devices:
    requests:
      - name: rdma
        exactly:
          deviceClassName: smcr.rdma-chain.github.io
`
	out, err := cp.kubectlWith("", claim, "create", "-f", "-")
	t.Logf("a claim of smcr.rdma-chain.github.io in %s: %v: %s", ns, err, out)
	if err == nil || !strings.Contains(out, "exceeded quota") {
		t.Errorf("want the claim refused by the namespace's quota")
	}
}

// testDRASMCRClass adds deploy/dra/smcr.yaml, the opt-in class whose
// claims get SMC-R, and runs pods/dra-smcr.yaml on node-a: a pod without
// the SMC-R annotation whose claim is of that class gets its SMC-R pnet
// entries.
func testDRASMCRClass(t *testing.T, cp *controlPlane) {
	class := filepath.Join(testenv.RepoRoot(), "deploy/dra/smcr.yaml")
	if out, err := cp.kubectlOut("apply", "-f", class); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", class, "--wait=false") })
	start := time.Now()
	cp.podReady(t, "dra-smcr", 5*time.Minute)
	t.Logf("CLUSTER-TIME dra-smcr Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	assertPnetEntries(t, cp, nodeNames[0], "default/dra-smcr")
	if out, err := cp.kubectlOut("delete", "pod", "dra-smcr", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
}

// podClaim is the name of pod's first resource claim.
func podClaim(t *testing.T, cp *controlPlane, pod string) string {
	t.Helper()
	return cp.poll(t, 3*time.Minute, func(s string) bool { return s != "" },
		"get", "pod", pod, "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
}
