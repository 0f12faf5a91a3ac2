//go:build cluster

package cluster

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// The driver's identity and what deploy/dra/policy.yaml names.
const (
	draNamespace    = "kube-system"
	draSA           = "rdma-chain-dra"
	draDriverName   = "rdma-chain.github.io"
	slicePolicy     = "rdma-chain-dra-resourceslices"
	claimPolicy     = "rdma-chain-dra-claim-status"
	policyNode      = "node-a" // the node the driver's pod is bound to
	policyOtherNode = "node-b"
	policyProbePod  = "rdma-chain-dra-probe"
	policyClaim     = "policy-probe"
	// policyOtherClaim is a claim allocated on policyOtherNode.
	policyOtherClaim = "policy-probe-" + policyOtherNode
)

// TestDRAPolicy tests deploy/dra's admission policies on a real API server,
// with no node VMs. The driver's service account and its RBAC and
// policies, rendered from the tier's kustomization, are applied; a Node
// and a pod of the driver's service account bound to it (never run: no
// kubelet) give a token with the node-name claim, as the driver's pod
// has. With it the driver writes its node's ResourceSlice and its own
// entry in a claim's status; it is refused, with the policy's message,
// another node's slice, one of its node in another node's pool, an entry
// of a claim allocated on another node (of that node's pool), another
// driver's entry, the allocation and the reservations; a token bound to
// no pod (no node claim) writes no slice and no entry. The API server
// runs with DRAResourceClaimGranularStatusAuthorization off, as a 1.34 or
// 1.35 one has no such check: with it on (1.36+), the API server refuses
// another driver's entry and the binding fields itself, before admission,
// and the policy's part could not be seen. It
// needs the tier's parts, not root; RC_CLUSTER_SCENARIOS names it
// dra-policy.
func TestDRAPolicy(t *testing.T) {
	if !selected(t, "dra-policy") {
		t.SkipNow()
	}
	parts := readParts(t)
	cp := startControlPlane(t, parts, "--feature-gates=DRAResourceClaimGranularStatusAuthorization=false")
	t.Logf("CLUSTER-TIME control plane ready %.1f s after etcd's start", cp.started.Seconds())
	start := time.Now()
	applyDRAPolicies(t, cp)
	bound, unbound := driverTokens(t, cp)
	setupPolicyObjects(t, cp)
	// The API server loads a new policy and its binding a moment after
	// they are stored: wait until each refuses its probe.
	cp.waitPolicy(t, slicePolicy, bound, sliceJSON("probe-"+policyOtherNode, policyOtherNode), "create", "--dry-run=server", "-f", "-")
	cp.waitPolicy(t, claimPolicy, bound, claimStatusJSON(nil, ownEntry(""), gpuEntry("eth9")), append(applyStatus("rdma-chain-dra"), "--dry-run=server")...)
	t.Logf("CLUSTER-TIME policies enforced %.1f s after kubectl apply (tokens and objects made meanwhile)", time.Since(start).Seconds())
	checkTypeChecking(t, cp)
	for _, tc := range policyCases(bound, unbound) {
		out, err := cp.kubectlWith(tc.token, tc.stdin, tc.args...)
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused, want admitted: %v: %s", tc.name, err, out)
		case tc.refusal != "" && (err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy '"+tc.policy+"'") ||
			!strings.Contains(out, tc.refusal)):
			t.Errorf("%s: want the refusal of %s (%q), got %v: %s", tc.name, tc.policy, tc.refusal, err, out)
		default:
			t.Logf("%s: %s", tc.name, firstLine(out))
		}
	}
	checkClaimEntries(t, cp)
}

// policyCase is one write of the driver's service account and what the
// policies answer: admitted (refusal "") or refused by policy with a
// message containing refusal.
type policyCase struct {
	name, token, stdin string
	args               []string
	policy, refusal    string
}

// policyCases are the writes, in order (the own slice is created before
// it is changed and deleted). The claim's status is written as the driver
// writes it, by server-side apply (kubectl patch would read the status
// first, which the RBAC does not grant); the field manager names no one,
// so the driver may apply as the one that wrote another driver's entry
// and the allocation (policy-setup), which removes what it leaves out.
func policyCases(bound, unbound string) []policyCase {
	otherNode := "not one of node " + policyOtherNode
	others := "another driver's entry was added, changed or removed"
	binding := "may not change status.allocation or status.reservedFor"
	otherPool := "status.devices entries of pool " + policyNode + ", not one of pool " + policyOtherNode
	own, gpu, alloc := ownEntry("rdma0"), gpuEntry("eth0"), probeAllocation(policyNode)
	reservation := []any{map[string]any{"resource": "pods", "name": "p", "uid": "00000000-0000-0000-0000-000000000001"}}
	return []policyCase{
		{"slice of its node created", bound, sliceJSON(policyNode, policyNode), []string{"create", "-f", "-"}, slicePolicy, ""},
		{"slice of its node updated", bound, "", []string{"label", "resourceslice", policyNode, "probe=1"}, slicePolicy, ""},
		{"slice of another node created", bound, sliceJSON("new-"+policyOtherNode, policyOtherNode), []string{"create", "-f", "-"}, slicePolicy, otherNode},
		{"slice of its node in another node's pool created", bound, slicePoolJSON("pool-"+policyOtherNode, policyNode, policyOtherNode),
			[]string{"create", "-f", "-"}, slicePolicy, "ResourceSlices of pool " + policyNode},
		{"slice of another node updated", bound, "", []string{"label", "resourceslice", policyOtherNode, "probe=1"}, slicePolicy, otherNode},
		{"slice of another node deleted", bound, "", []string{"delete", "resourceslice", policyOtherNode}, slicePolicy, otherNode},
		{"token of no pod: slice of the node created", unbound, sliceJSON("unbound-"+policyNode, policyNode), []string{"create", "-f", "-"},
			slicePolicy, "token names no node"},
		{"token of no pod: slice of the node deleted", unbound, "", []string{"delete", "resourceslice", policyNode}, slicePolicy, "token names no node"},
		{"slice of its node deleted", bound, "", []string{"delete", "resourceslice", policyNode}, slicePolicy, ""},
		{"own claim entry applied", bound, claimStatusJSON(nil, own), applyStatus("rdma-chain-dra"), claimPolicy, ""},
		{"entry of a claim on another node applied", bound, claimStatusJSONOf(policyOtherClaim, nil, otherNodeEntry("rdma0")),
			applyStatus("rdma-chain-dra"), claimPolicy, otherPool},
		{"token of no pod: own claim entry changed", unbound, claimStatusJSON(nil, ownEntry("rdma9")), applyStatus("rdma-chain-dra"),
			claimPolicy, "token names no node"},
		{"other driver's entry changed", bound, claimStatusJSON(nil, own, gpuEntry("eth9")), applyStatus("rdma-chain-dra"), claimPolicy, others},
		{"other driver's entry removed (applied as its manager)", bound, claimStatusJSON(map[string]any{"allocation": alloc}, own),
			applyStatus("policy-setup"), claimPolicy, others},
		{"reservation added", bound, claimStatusJSON(map[string]any{"reservedFor": reservation}, own), applyStatus("rdma-chain-dra"), claimPolicy, binding},
		{"allocation cleared (applied as its manager)", bound, claimStatusJSON(nil, own, gpu), applyStatus("policy-setup"), claimPolicy, binding},
	}
}

// applyStatus is kubectl's server-side apply of the claim's status as
// field manager, taking over fields others hold, as the driver does.
func applyStatus(manager string) []string {
	return []string{"apply", "--server-side", "--force-conflicts", "--field-manager=" + manager, "--subresource=status", "-f", "-"}
}

// applyDRAPolicies applies, of the tier's install (integration/cluster/deploy
// with the deploy/dra component, rendered by kubectl kustomize), the
// driver's ServiceAccount, RBAC and admission policies.
func applyDRAPolicies(t *testing.T, cp *controlPlane) {
	t.Helper()
	out, err := cp.kubectlOut("kustomize", filepath.Join(testenv.RepoRoot(), "integration/cluster/deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize: %v: %s", err, out)
	}
	keep := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	kindLine := regexp.MustCompile(`(?m)^kind: (\S+)$`)
	var docs, kinds []string
	for _, doc := range strings.Split(out, "\n---\n") {
		if m := kindLine.FindStringSubmatch(doc); m != nil && keep[m[1]] {
			docs, kinds = append(docs, doc), append(kinds, m[1])
		}
	}
	t.Logf("applying, of the rendered install: %s", strings.Join(kinds, ", "))
	if out, err := cp.kubectlWith("", strings.Join(docs, "\n---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// driverTokens makes the Node, the driver's pod bound to it, and two
// tokens of the driver's service account: bound to that pod (the API
// server adds its node, authentication.kubernetes.io/node-name) and bound
// to nothing.
func driverTokens(t *testing.T, cp *controlPlane) (bound, unbound string) {
	t.Helper()
	node := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": policyNode}}
	// The driver's pod as the DaemonSet's, never run: its node has no
	// kubelet. It tolerates every taint, as the DaemonSet's does, so the
	// node lifecycle controller does not evict it from the node that
	// never becomes Ready.
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": policyProbePod, "namespace": draNamespace},
		"spec": map[string]any{"nodeName": policyNode, "serviceAccountName": draSA,
			"tolerations": []any{map[string]any{"operator": "Exists"}},
			"containers":  []any{map[string]any{"name": "dra", "image": "localhost/rdma-chain:dev"}}}}
	for _, obj := range []any{node, pod} {
		if out, err := cp.kubectlWith("", mustJSON(t, obj), "create", "-f", "-"); err != nil {
			t.Fatalf("kubectl create: %v: %s", err, out)
		}
	}
	token := func(args ...string) string {
		out, err := cp.kubectlOut(append([]string{"create", "token", draSA, "-n", draNamespace, "--duration=1h"}, args...)...)
		if err != nil {
			t.Fatalf("kubectl create token: %v: %s", err, out)
		}
		return out
	}
	bound, unbound = token("--bound-object-kind=Pod", "--bound-object-name="+policyProbePod), token()
	for _, tc := range []struct {
		name, token, node string
	}{{"bound to the pod", bound, policyNode}, {"bound to nothing", unbound, ""}} {
		out, err := cp.kubectlWith(tc.token, "", "auth", "whoami", "-o", "json")
		var review struct {
			Status struct {
				UserInfo struct {
					Username string              `json:"username"`
					Extra    map[string][]string `json:"extra"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err != nil || json.Unmarshal([]byte(out), &review) != nil {
			t.Fatalf("kubectl auth whoami, token %s: %v: %s", tc.name, err, out)
		}
		u := review.Status.UserInfo
		nodes := u.Extra["authentication.kubernetes.io/node-name"]
		if u.Username != "system:serviceaccount:"+draNamespace+":"+draSA || strings.Join(nodes, ",") != tc.node {
			t.Fatalf("token %s: user %s, node-name %q, want node %q", tc.name, u.Username, nodes, tc.node)
		}
		t.Logf("token %s: %s, extra %v", tc.name, u.Username, u.Extra)
	}
	return bound, unbound
}

// setupPolicyObjects makes, as the admin, another node's ResourceSlice, a
// claim allocated on the driver's node a device of this driver and one of
// gpu.example.com, each with its entry in status.devices, and a claim
// allocated the same on another node, with no entry.
func setupPolicyObjects(t *testing.T, cp *controlPlane) {
	t.Helper()
	claim := func(name string) string {
		return mustJSON(t, map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"devices": map[string]any{"requests": []any{
				map[string]any{"name": "rdma", "exactly": map[string]any{"deviceClassName": draDriverName}},
				map[string]any{"name": "gpu", "exactly": map[string]any{"deviceClassName": "gpu.example.com"}},
			}}}})
	}
	for _, step := range []struct {
		stdin string
		args  []string
	}{
		{sliceJSON(policyOtherNode, policyOtherNode), []string{"create", "-f", "-"}},
		{claim(policyClaim), []string{"create", "-f", "-"}},
		{claimStatusJSON(map[string]any{"allocation": probeAllocation(policyNode)}, ownEntry(""), gpuEntry("eth0")), applyStatus("policy-setup")},
		{claim(policyOtherClaim), []string{"create", "-f", "-"}},
		{claimStatusJSONOf(policyOtherClaim, map[string]any{"allocation": probeAllocation(policyOtherNode)}), applyStatus("policy-setup")},
	} {
		if out, err := cp.kubectlWith("", step.stdin, step.args...); err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(step.args, " "), err, out)
		}
	}
}

// checkTypeChecking checks that the API server type-checked each policy
// against the typed objects (and their cost) and has no warning.
func checkTypeChecking(t *testing.T, cp *controlPlane) {
	t.Helper()
	for _, p := range []string{slicePolicy, claimPolicy} {
		out := cp.poll(t, time.Minute, func(s string) bool { return strings.Contains(s, `"typeChecking"`) },
			"get", "validatingadmissionpolicy", p, "-o", "jsonpath={.status}")
		if strings.Contains(out, "expressionWarnings") {
			t.Errorf("policy %s: the API server's type check warns: %s", p, out)
		}
		t.Logf("policy %s: status %s", p, out)
	}
}

// probeAllocation is a claim's allocation on node: a device of this
// driver and one of gpu.example.com, of node's pools.
func probeAllocation(node string) map[string]any {
	return map[string]any{
		"devices": map[string]any{"results": []any{
			map[string]any{"request": "rdma", "driver": draDriverName, "pool": node, "device": "mlx5-0"},
			map[string]any{"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": "gpu-0"},
		}},
		"nodeSelector": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchFields": []any{
			map[string]any{"key": "metadata.name", "operator": "In", "values": []any{node}}}}}},
	}
}

// waitPolicy runs the probe (a write the policy refuses) with the
// driver's token until the refusal names the policy; it fails the test
// (and the cases go on, to show what a missing policy lets through) when
// it is not refused within a minute.
func (cp *controlPlane) waitPolicy(t *testing.T, policy, token, stdin string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := cp.kubectlWith(token, stdin, args...)
		if err != nil && strings.Contains(out, "ValidatingAdmissionPolicy '"+policy+"'") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("policy %s does not refuse its probe within a minute: %v: %s", policy, err, out)
			return
		}
		time.Sleep(time.Second) // one kubectl a second
	}
}

// checkClaimEntries checks that, after the cases, the claim holds the
// driver's entry as it applied it, gpu.example.com's as the admin wrote
// it, both devices allocated and no reservation; and that the claim on
// another node holds no entry.
func checkClaimEntries(t *testing.T, cp *controlPlane) {
	t.Helper()
	for _, tc := range []struct {
		claim string
		want  []string
	}{
		{policyClaim, []string{draDriverName + "/mlx5-0=rdma0", "gpu.example.com/gpu-0=eth0", "allocated:mlx5-0", "allocated:gpu-0", "reserved:"}},
		{policyOtherClaim, []string{"allocated:mlx5-0", "allocated:gpu-0", "reserved:"}},
	} {
		out, err := cp.kubectlOut("get", "resourceclaim", tc.claim, "-n", "default", "-o",
			`jsonpath={range .status.devices[*]}{.driver}/{.device}={.networkData.interfaceName} {end}`+
				`{range .status.allocation.devices.results[*]}allocated:{.device} {end}reserved:{.status.reservedFor}`)
		if got := strings.Fields(out); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("claim %s status %q (%v), want %q", tc.claim, out, err, tc.want)
		}
	}
}

// kubectlWith runs kubectl with stdin as the admin, or with token ("" for
// the admin's) as whoever it names.
func (cp *controlPlane) kubectlWith(token, stdin string, args ...string) (string, error) {
	if token != "" {
		args = append([]string{"--token", token}, args...)
	}
	start := time.Now()
	cmd := exec.Command(cp.kubectl, append([]string{"--kubeconfig", cp.admin}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	cp.runs.count(args, time.Since(start))
	return strings.TrimSpace(string(out)), err
}

// sliceJSON is a ResourceSlice of this driver named name, of node's pool.
func sliceJSON(name, node string) string { return slicePoolJSON(name, node, node) }

// slicePoolJSON is a ResourceSlice of this driver named name, of node, in
// pool.
func slicePoolJSON(name, node, pool string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"driver": draDriverName, "nodeName": node,
			"pool": map[string]any{"name": pool, "generation": 1, "resourceSliceCount": 1}}})
	return string(b)
}

// ownEntry is the driver's status.devices entry of the claim's device,
// with interface ifname ("" for none yet).
func ownEntry(ifname string) map[string]any {
	return deviceEntry(draDriverName, "mlx5-0", ifname)
}

// otherNodeEntry is the driver's entry of the device of the claim on
// another node, of that node's pool.
func otherNodeEntry(ifname string) map[string]any {
	e := ownEntry(ifname)
	e["pool"] = policyOtherNode
	return e
}

// gpuEntry is gpu.example.com's entry of the claim's other device.
func gpuEntry(ifname string) map[string]any {
	return deviceEntry("gpu.example.com", "gpu-0", ifname)
}

func deviceEntry(driver, device, ifname string) map[string]any {
	e := map[string]any{"driver": driver, "pool": policyNode, "device": device}
	if ifname != "" {
		e["networkData"] = map[string]any{"interfaceName": ifname}
	}
	return e
}

// claimStatusJSON is an apply configuration of the claim's status: the
// fields of status and status.devices entries.
func claimStatusJSON(status map[string]any, entries ...map[string]any) string {
	return claimStatusJSONOf(policyClaim, status, entries...)
}

// claimStatusJSONOf is claimStatusJSON of the claim named claim; with no
// entries it leaves status.devices out.
func claimStatusJSONOf(claim string, status map[string]any, entries ...map[string]any) string {
	st := map[string]any{}
	if len(entries) > 0 {
		st["devices"] = entries
	}
	for k, v := range status {
		st[k] = v
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": claim, "namespace": "default"}, "status": st})
	return string(b)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
