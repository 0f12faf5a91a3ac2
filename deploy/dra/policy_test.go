// Package dra holds the tests of the DRA component's admission policy
// (policy.yaml): what rdma-chain-dra's service account may write.
package dra

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/deploy/internal/celtest"
)

const (
	// driver is pkg/dra.DriverName, the name the driver's entries carry.
	driver = "rdma-chain.github.io"
	// saUser is the user name of the DaemonSet's service account (rbac.yaml).
	saUser   = "system:serviceaccount:kube-system:rdma-chain-dra"
	nodeKey  = "authentication.kubernetes.io/node-name"
	slicesVP = "rdma-chain-dra-resourceslices"
	claimsVP = "rdma-chain-dra-claim-status"
)

// policies reads policy.yaml strictly (unknown fields fail): each policy
// followed by its binding.
func policies(t *testing.T) map[string]*admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 4 {
		t.Fatalf("want two policies, each with its binding, got %d documents", len(docs))
	}
	out := map[string]*admissionv1.ValidatingAdmissionPolicy{}
	for i := 0; i < len(docs); i += 2 {
		var p admissionv1.ValidatingAdmissionPolicy
		var b admissionv1.ValidatingAdmissionPolicyBinding
		if err := yaml.UnmarshalStrict(docs[i], &p); err != nil {
			t.Fatalf("policy: %v", err)
		}
		if err := yaml.UnmarshalStrict(docs[i+1], &b); err != nil {
			t.Fatalf("binding: %v", err)
		}
		checkShape(t, &p, &b)
		out[p.Name] = &p
	}
	if len(out) != 2 || out[slicesVP] == nil || out[claimsVP] == nil {
		t.Fatalf("policies %v, want %s and %s", slices.Sorted(maps.Keys(out)), slicesVP, claimsVP)
	}
	return out
}

// checkShape checks that the binding denies with its policy, which fails
// closed and matches the driver's service account alone.
func checkShape(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	if p.APIVersion != "admissionregistration.k8s.io/v1" || p.Kind != "ValidatingAdmissionPolicy" ||
		b.APIVersion != p.APIVersion || b.Kind != "ValidatingAdmissionPolicyBinding" {
		t.Fatalf("kinds %s/%s, %s/%s", p.APIVersion, p.Kind, b.APIVersion, b.Kind)
	}
	if b.Name != p.Name || b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.MatchResources != nil || b.Spec.ParamRef != nil {
		t.Errorf("binding %s %+v does not deny every request of policy %s", b.Name, b.Spec, p.Name)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", p.Name, p.Spec.FailurePolicy)
	}
	want := "request.userInfo.username == '" + saUser + "'"
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != want {
		t.Errorf("%s: match conditions %+v, want %s", p.Name, p.Spec.MatchConditions, want)
	}
}

// TestPolicyRules checks that each policy matches the writes the RBAC
// grants the driver on its resource, in every served version
// (Equivalent).
func TestPolicyRules(t *testing.T) {
	ps := policies(t)
	for _, tc := range []struct {
		policy, resource string
		ops              []admissionv1.OperationType
	}{
		{slicesVP, "resourceslices", []admissionv1.OperationType{"CREATE", "UPDATE", "DELETE"}},
		{claimsVP, "resourceclaims/status", []admissionv1.OperationType{"UPDATE"}},
	} {
		mc := ps[tc.policy].Spec.MatchConstraints
		if mc == nil || mc.MatchPolicy == nil || *mc.MatchPolicy != admissionv1.Equivalent || len(mc.ResourceRules) != 1 {
			t.Fatalf("%s: match constraints %+v", tc.policy, mc)
		}
		r := mc.ResourceRules[0]
		if !slices.Equal(r.APIGroups, []string{"resource.k8s.io"}) || !slices.Equal(r.Resources, []string{tc.resource}) ||
			!slices.Equal(r.Operations, tc.ops) {
			t.Errorf("%s: rule %+v, want %s on %v", tc.policy, r, tc.resource, tc.ops)
		}
	}
}

// celEnv is the part of the API server's admission CEL environment the
// policies use: their variables (as dynamic values) and optional types.
// The API server's own compile, with typed objects, is the cluster
// tier's (TestDRAPolicy).
func celEnv(t *testing.T) *cel.Env {
	t.Helper()
	return celtest.Env(t, true, "object", "oldObject", "request", "variables")
}

// eval is celtest.Eval.
func eval(t *testing.T, env *cel.Env, expr string, vars map[string]any) any {
	t.Helper()
	return celtest.Eval(t, env, expr, vars)
}

// admitted runs p on a request as the API server would: not matched when
// a match condition is false, else denied when a validation fails, with
// the messages of those that fail in order (the API server reports the
// first). Variables are evaluated in order, each seeing the ones before.
func admitted(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, vars map[string]any) (matched, admit bool, msgs []string) {
	t.Helper()
	env := celEnv(t)
	for _, mc := range p.Spec.MatchConditions {
		if eval(t, env, mc.Expression, vars) != true {
			return false, true, nil
		}
	}
	variables := map[string]any{}
	vars["variables"] = variables
	for _, v := range p.Spec.Variables {
		variables[v.Name] = eval(t, env, v.Expression, vars)
	}
	for _, v := range p.Spec.Validations {
		if eval(t, env, v.Expression, vars) == true {
			continue
		}
		if v.Reason == nil || *v.Reason != "Forbidden" {
			t.Errorf("%s: validation %q has reason %v, want Forbidden", p.Name, v.Expression, v.Reason)
		}
		m := v.Message
		if v.MessageExpression != "" {
			m, _ = eval(t, env, v.MessageExpression, vars).(string)
		}
		msgs = append(msgs, m)
	}
	return true, len(msgs) == 0, msgs
}

// request is an admission request of user (with the node-name extra
// values nodes) for op.
func request(user, op string, nodes ...string) map[string]any {
	extra := map[string]any{}
	if nodes != nil {
		extra[nodeKey] = nodes
	}
	return map[string]any{"operation": op, "userInfo": map[string]any{"username": user, "extra": extra}}
}

// slice is a ResourceSlice of node ("" for one of no node: allNodes).
func slice(node string) map[string]any {
	spec := map[string]any{"driver": driver, "pool": map[string]any{"name": node, "generation": 1, "resourceSliceCount": 1}}
	if node == "" {
		spec["allNodes"] = true
	} else {
		spec["nodeName"] = node
	}
	return map[string]any{"metadata": map[string]any{"name": node + "-" + driver}, "spec": spec}
}

// slicePool is slice(node) with its pool named pool.
func slicePool(node, pool string) map[string]any {
	s := slice(node)
	s["spec"].(map[string]any)["pool"].(map[string]any)["name"] = pool
	return s
}

// TestSlicePolicyDecides checks that the driver's service account
// writes the ResourceSlices of the node its token names, of the pool
// named after it, and no other; a token that names no node writes none;
// other users are not matched.
func TestSlicePolicyDecides(t *testing.T) {
	p := policies(t)[slicesVP]
	const other = "one of node node-b"
	for _, tc := range []struct {
		name       string
		req        map[string]any
		obj, old   map[string]any
		matched    bool
		allow      bool
		msgContent string
	}{
		{"own node create", request(saUser, "CREATE", "node-a"), slice("node-a"), nil, true, true, ""},
		{"own node update", request(saUser, "UPDATE", "node-a"), slice("node-a"), slice("node-a"), true, true, ""},
		{"own node delete", request(saUser, "DELETE", "node-a"), nil, slice("node-a"), true, true, ""},
		{"other node create", request(saUser, "CREATE", "node-a"), slice("node-b"), nil, true, false, other},
		{"other node update", request(saUser, "UPDATE", "node-a"), slice("node-b"), slice("node-b"), true, false, other},
		{"other node delete", request(saUser, "DELETE", "node-a"), nil, slice("node-b"), true, false, other},
		{"own slice moved to another node", request(saUser, "UPDATE", "node-a"), slice("node-b"), slice("node-a"), true, false, other},
		{"other node's slice moved to own", request(saUser, "UPDATE", "node-a"), slice("node-a"), slice("node-b"), true, false, "may write only the ResourceSlices of that node"},
		{"own node, other node's pool, create", request(saUser, "CREATE", "node-a"), slicePool("node-a", "node-b"), nil, true, false, "of pool node-a"},
		{"own node, pool renamed", request(saUser, "UPDATE", "node-a"), slicePool("node-a", "node-b"), slice("node-a"), true, false, "of pool node-a"},
		{"own node, pool renamed back", request(saUser, "UPDATE", "node-a"), slice("node-a"), slicePool("node-a", "node-b"), true, false, "of pool node-a"},
		{"own node, other node's pool, delete", request(saUser, "DELETE", "node-a"), nil, slicePool("node-a", "node-b"), true, false, "of pool node-a"},
		{"other node and its pool, moved to own node", request(saUser, "UPDATE", "node-a"), slicePool("node-a", "node-b"), slice("node-b"), true, false, "may write only the ResourceSlices of that node"},
		{"slice of no node", request(saUser, "CREATE", "node-a"), slice(""), nil, true, false, "one of no node"},
		{"no node claim", request(saUser, "CREATE"), slice("node-a"), nil, true, false, "token names no node"},
		{"no node claim, delete", request(saUser, "DELETE"), nil, slice("node-a"), true, false, "token names no node"},
		{"empty node claim", request(saUser, "CREATE", ""), slice("node-a"), nil, true, false, "token names no node"},
		{"two node claims", request(saUser, "CREATE", "node-a", "node-a"), slice("node-a"), nil, true, false, "token names no node"},
		{"other service account", request("system:serviceaccount:kube-system:other", "CREATE", "node-a"), slice("node-b"), nil, false, true, ""},
		{"same name, other namespace", request("system:serviceaccount:default:rdma-chain-dra", "CREATE"), slice("node-b"), nil, false, true, ""},
		{"a node", request("system:node:node-a", "CREATE"), slice("node-b"), nil, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.obj, "oldObject": tc.old, "request": tc.req}
			matched, allow, msgs := admitted(t, p, vars)
			if matched != tc.matched || allow != tc.allow {
				t.Fatalf("matched %v admitted %v (%q), want %v %v", matched, allow, msgs, tc.matched, tc.allow)
			}
			// One refusal, which says why: a token with no node is not
			// also told that the slice is not of its node.
			if !allow && (len(msgs) != 1 || !strings.Contains(msgs[0], tc.msgContent)) {
				t.Errorf("messages %q, want one containing %q", msgs, tc.msgContent)
			}
			t.Logf("matched %v admitted %v %q", matched, allow, msgs)
		})
	}
}

// status is a device status entry of driver for device, its interface
// name ifname.
func status(drv, device, ifname string) map[string]any {
	return map[string]any{"driver": drv, "pool": "node-a", "device": device,
		"networkData": map[string]any{"interfaceName": ifname}}
}

// onPool returns a copy of entry e of pool, as of a device on that node
// (the policy does not read the allocation, which the API server checks
// the entries against before admission).
func onPool(e map[string]any, pool string) map[string]any {
	c := maps.Clone(e)
	c["pool"] = pool
	return c
}

// claim is a ResourceClaim allocated two devices, one of this driver and
// one of gpu.example.com, with the status entries given.
func claim(devices ...map[string]any) map[string]any {
	results := []any{
		map[string]any{"request": "rdma", "driver": driver, "pool": "node-a", "device": "mlx5-0"},
		map[string]any{"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
	}
	st := map[string]any{"allocation": map[string]any{"devices": map[string]any{"results": results}}}
	if devices != nil {
		list := []any{}
		for _, d := range devices {
			list = append(list, d)
		}
		st["devices"] = list
	}
	return map[string]any{"metadata": map[string]any{"name": "c"}, "status": st}
}

// with returns c with status field set to v, or without it for nil (as
// the API server leaves out an absent field).
func with(c map[string]any, field string, v any) map[string]any {
	if v == nil {
		delete(c["status"].(map[string]any), field)
		return c
	}
	c["status"].(map[string]any)[field] = v
	return c
}

// TestClaimPolicyDecides checks that the driver's service account
// changes only its driver's status.devices entries of a claim, and of
// those only the ones of its node's pool; another driver's entries, the
// allocation and the reservations stay; a token that names no node
// writes no entry; other users are not matched.
func TestClaimPolicyDecides(t *testing.T) {
	p := policies(t)[claimsVP]
	own, gpu := status(driver, "mlx5-0", "rdma0"), status("gpu.example.com", "gpu-0", "")
	// nodeB is the driver's entry of a device of node-b's pool, nodeB2
	// the same changed.
	nodeB := onPool(status(driver, "mlx5-1", "rdma0"), "node-b")
	nodeB2 := onPool(status(driver, "mlx5-1", "rdma1"), "node-b")
	sa, saB := request(saUser, "UPDATE", "node-a"), request(saUser, "UPDATE", "node-b")
	noNode, emptyNode := request(saUser, "UPDATE"), request(saUser, "UPDATE", "")
	const others, binding = "another driver's entry", "may not change status.allocation or status.reservedFor"
	const poolB, poolA, unbound = "on node node-a may write only the status.devices entries of pool node-a, not one of pool node-b",
		"on node node-b may write only the status.devices entries of pool node-b, not one of pool node-a", "token names no node"
	for _, tc := range []struct {
		name       string
		req        map[string]any
		obj, old   map[string]any
		allow      bool
		msgContent string
	}{
		{"own entry changed", sa, claim(status(driver, "mlx5-0", "rdma1"), gpu), claim(own, gpu), true, ""},
		{"own entry added", sa, claim(gpu, own), claim(gpu), true, ""},
		{"own entry removed", sa, claim(gpu), claim(own, gpu), true, ""},
		{"first entry", sa, claim(own), claim(), true, ""},
		{"allocation set on a claim without status", sa, claim(own), map[string]any{"metadata": map[string]any{"name": "c"}}, false, binding},
		{"own entry moved after the other", sa, claim(gpu, own), claim(own, gpu), true, ""},
		{"other driver's entry changed", sa, claim(own, status("gpu.example.com", "gpu-0", "eth9")), claim(own, gpu), false, others},
		{"other driver's entry removed", sa, claim(own), claim(own, gpu), false, others},
		{"other driver's entry added", sa, claim(own, gpu), claim(own), false, others},
		{"other driver's entry renamed to this driver", sa, claim(own, status(driver, "gpu-0", "")), claim(own, gpu), false, others},
		{"allocation cleared", sa, with(claim(own, gpu), "allocation", nil), claim(own, gpu), false, binding},
		{"allocation cleared, its entries dropped", sa, with(claim(), "allocation", nil), claim(own, gpu), false, binding},
		{"allocation cleared, another node's entries dropped", sa, with(claim(), "allocation", nil), claim(nodeB, gpu), false, binding},
		{"allocation changed", sa, with(claim(own, gpu), "allocation", map[string]any{"devices": map[string]any{"results": []any{}}}),
			claim(own, gpu), false, binding},
		{"reservation added", sa, with(claim(own, gpu), "reservedFor", []any{map[string]any{"resource": "pods", "name": "p", "uid": "u"}}),
			claim(own, gpu), false, binding},
		{"other node's entry added", sa, claim(own, gpu, nodeB), claim(own, gpu), false, poolB},
		{"other node's entry changed", sa, claim(own, gpu, nodeB2), claim(own, gpu, nodeB), false, poolB},
		{"other node's entry removed", sa, claim(own, gpu), claim(own, gpu, nodeB), false, poolB},
		{"other node's entry added with its own", sa, claim(status(driver, "mlx5-0", "rdma1"), gpu, nodeB), claim(own, gpu), false, poolB},
		{"own entry moved to another node's pool", sa, claim(onPool(own, "node-b"), gpu), claim(own, gpu), false, poolB},
		{"node-b's token changes node-a's entry", saB, claim(status(driver, "mlx5-0", "rdma1"), gpu), claim(own, gpu), false, poolA},
		{"node-b's token changes its own entry", saB, claim(own, gpu, nodeB2), claim(own, gpu, nodeB), true, ""},
		{"other node's entry resent as it was", sa, claim(status(driver, "mlx5-0", "rdma1"), gpu, nodeB), claim(own, gpu, nodeB), true, ""},
		{"other node's entry resent in another place", sa, claim(nodeB, status(driver, "mlx5-0", "rdma1"), gpu), claim(own, gpu, nodeB), true, ""},
		{"token of no node changes own entry", noNode, claim(status(driver, "mlx5-0", "rdma1"), gpu), claim(own, gpu), false, unbound},
		{"token of no node adds other node's entry", noNode, claim(own, gpu, nodeB), claim(own, gpu), false, unbound},
		{"token of no node removes own entry", emptyNode, claim(gpu), claim(own, gpu), false, unbound},
		{"token of two nodes changes own entry", request(saUser, "UPDATE", "node-a", "node-a"), claim(status(driver, "mlx5-0", "rdma1"), gpu),
			claim(own, gpu), false, unbound},
		{"token of no node changes other driver's entry", noNode, claim(own), claim(own, gpu), false, others},
		{"token of no node resends the entries", noNode, claim(gpu, own, nodeB), claim(own, gpu, nodeB), true, ""},
		{"other user changes other driver's entry", request("system:serviceaccount:kube-system:gpu-driver", "UPDATE", "node-a"),
			claim(own), claim(own, gpu), true, ""},
		{"other user changes other node's entry", request("system:node:node-a", "UPDATE"), claim(own, gpu), claim(own, gpu, nodeB), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.obj, "oldObject": tc.old, "request": tc.req}
			matched, allow, msgs := admitted(t, p, vars)
			wantMatched := tc.req["userInfo"].(map[string]any)["username"] == saUser
			if matched != wantMatched || allow != tc.allow {
				t.Fatalf("matched %v admitted %v (%q), want %v %v", matched, allow, msgs, wantMatched, tc.allow)
			}
			if !allow && !strings.Contains(msgs[0], tc.msgContent) {
				t.Errorf("first message %q, want one containing %q", msgs[0], tc.msgContent)
			}
			t.Logf("matched %v admitted %v %q", matched, allow, msgs)
		})
	}
}

// The API server's limits on the runtime cost of a policy's CEL
// (k8s.io/apiserver/pkg/apis/cel): per expression, and for all of one
// request's expressions of a binding.
const (
	perCallLimit         = 1000000
	runtimeCELCostBudget = 10000000
)

// cost evaluates every variable and validation of p, and the message
// expressions of those that fail, on vars, tracking cel-go's runtime
// cost (the API server's for the built-in functions these call), and
// returns the largest cost of one expression and their sum.
func cost(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, vars map[string]any) (largest, total uint64) {
	t.Helper()
	env := celEnv(t)
	run := func(expr string) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptTrackCost))
		if err != nil {
			t.Fatal(err)
		}
		out, det, err := prg.Eval(vars)
		if err != nil {
			t.Fatalf("eval %q: %v", expr, err)
		}
		c := *det.ActualCost()
		largest, total = max(largest, c), total+c
		return out.Value()
	}
	variables := map[string]any{}
	vars["variables"] = variables
	for _, v := range p.Spec.Variables {
		variables[v.Name] = run(v.Expression)
	}
	for _, v := range p.Spec.Validations {
		if run(v.Expression) != true && v.MessageExpression != "" {
			run(v.MessageExpression) // evaluated only on a failure
		}
	}
	return largest, total
}

// TestClaimPolicyCost checks that the claim policy stays within the API
// server's cost limits on the largest claims: 32 allocated devices (the
// API server's limit, resource.AllocationResultsMaxSize), each with a
// full entry, all of them written. It asks for a tenth of the limits:
// the API server's costs of typed objects are not exactly these.
func TestClaimPolicyCost(t *testing.T) {
	p := policies(t)[claimsVP]
	// entries are n entries of driver drv of pool, full: 8 conditions
	// (the most), 16 addresses, interface "rdma"+suffix.
	entries := func(n int, drv, pool, suffix string) []map[string]any {
		var out []map[string]any
		for i := range n {
			conds, ips := []any{}, []any{}
			for j := range 8 {
				conds = append(conds, map[string]any{"type": "Ready" + strings.Repeat("x", j), "status": "True",
					"reason": "Configured", "message": strings.Repeat("m", 100), "lastTransitionTime": "2026-01-01T00:00:00Z"})
			}
			for j := range 16 {
				ips = append(ips, fmt.Sprintf("10.0.%d.1/24", j))
			}
			e := onPool(status(drv, fmt.Sprintf("dev-%d", i), "rdma"+suffix), pool)
			e["conditions"], e["networkData"].(map[string]any)["ips"] = conds, ips
			out = append(out, e)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		obj, old []map[string]any
	}{
		{"all of another node's entries changed", entries(32, driver, "node-b", "1"), entries(32, driver, "node-b", "0")},
		{"all own entries changed", entries(32, driver, "node-a", "1"), entries(32, driver, "node-a", "0")},
		{"all own entries resent", entries(32, driver, "node-a", "0"), entries(32, driver, "node-a", "0")},
		{"other drivers' entries resent", entries(32, "gpu.example.com", "node-a", "0"), entries(32, "gpu.example.com", "node-a", "0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": claim(tc.obj...), "oldObject": claim(tc.old...), "request": request(saUser, "UPDATE", "node-a")}
			largest, total := cost(t, p, vars)
			if largest > perCallLimit/10 || total > runtimeCELCostBudget/10 {
				t.Errorf("largest cost %d, total %d: want a tenth of the limits (%d, %d) at most", largest, total, perCallLimit, runtimeCELCostBudget)
			}
			t.Logf("largest cost %d, total %d", largest, total)
		})
	}
}
