//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testAdmission tests deploy/admission's ValidatingAdmissionPolicy,
// applied as shipped, on the real API server: a pod asking for SMC-R
// (network.alibabacloud.com/erdma-smcr: "true", in any letter case) is
// refused with the policy's message in a namespace without the label
// rdma-chain.io/smcr-allowed=true, and admitted in one with it; a pod
// without the annotation is admitted anywhere. Pods are created with
// server-side dry run (admission runs, nothing is stored).
func testAdmission(t *testing.T, cp *controlPlane) {
	dir := filepath.Join(testenv.RepoRoot(), "deploy/admission")
	if out, err := cp.kubectlOut("apply", "-k", dir); err != nil {
		t.Fatalf("kubectl apply -k deploy/admission: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-k", dir, "--wait=false") })
	for _, args := range [][]string{
		{"create", "namespace", "smcr-allowed"},
		{"label", "namespace", "smcr-allowed", "rdma-chain.io/smcr-allowed=true"},
		{"create", "namespace", "smcr-not-allowed"},
	} {
		if out, err := cp.kubectlOut(args...); err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_, _ = cp.kubectlOut("delete", "namespace", "smcr-allowed", "smcr-not-allowed", "--wait=false")
	})
	// dryRun creates a pod in ns with the annotation value ("" for none).
	dryRun := func(ns, smcr string) (string, error) {
		args := []string{"-n", ns, "run", "smcr-probe", "--image=" + testImage, "--image-pull-policy=Never",
			"--restart=Never", "--dry-run=server", "-o", "name"}
		if smcr != "" {
			args = append(args, "--annotations=network.alibabacloud.com/erdma-smcr="+smcr)
		}
		return cp.kubectlOut(append(args, "--", "/bin/busybox", "true")...)
	}
	// The API server compiles a new policy before it enforces it.
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		out, err := dryRun("smcr-not-allowed", "true")
		if err == nil {
			time.Sleep(time.Second) // one kubectl per second
		}
		return err != nil, "still admitted: " + out
	})
	t.Logf("CLUSTER-TIME admission policy enforced %.1f s after kubectl apply", time.Since(start).Seconds())
	for _, tc := range []struct {
		ns, smcr string
		admit    bool
	}{
		{"smcr-not-allowed", "true", false},
		{"smcr-not-allowed", "TRUE", false},
		{"default", "true", false},
		{"smcr-not-allowed", "false", true},
		{"smcr-not-allowed", "", true},
		{"smcr-allowed", "true", true},
		{"smcr-allowed", "True", true},
	} {
		out, err := dryRun(tc.ns, tc.smcr)
		switch {
		case tc.admit && err != nil:
			t.Errorf("namespace %s, erdma-smcr %q: refused: %s", tc.ns, tc.smcr, out)
		case !tc.admit && (err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'rdma-chain-smcr'") ||
			!strings.Contains(out, "namespace "+tc.ns+" may not set network.alibabacloud.com/erdma-smcr")):
			t.Errorf("namespace %s, erdma-smcr %q: want the policy's refusal, got %v: %s", tc.ns, tc.smcr, err, out)
		default:
			t.Logf("namespace %s, erdma-smcr %q: admitted %v: %s", tc.ns, tc.smcr, tc.admit, out)
		}
	}
}
