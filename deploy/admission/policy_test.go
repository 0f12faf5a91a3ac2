// Package admission holds the cluster-side guard of SMC-R: a
// ValidatingAdmissionPolicy (smcr-policy.yaml) that lets only labelled
// namespaces ask for it.
package admission

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/deploy/internal/celtest"
)

// policy reads smcr-policy.yaml strictly: unknown fields fail.
func policy(t *testing.T) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	data, err := os.ReadFile("smcr-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("want a policy and a binding, got %d documents", len(docs))
	}
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict(docs[0], &p); err != nil {
		t.Fatalf("policy: %v", err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &b); err != nil {
		t.Fatalf("binding: %v", err)
	}
	return &p, &b
}

// TestPolicyShape checks that the binding applies the policy with Deny,
// which fails closed, to pod creation and update.
func TestPolicyShape(t *testing.T) {
	p, b := policy(t)
	if p.APIVersion != "admissionregistration.k8s.io/v1" || p.Kind != "ValidatingAdmissionPolicy" ||
		b.APIVersion != p.APIVersion || b.Kind != "ValidatingAdmissionPolicyBinding" {
		t.Fatalf("kinds %s/%s, %s/%s", p.APIVersion, p.Kind, b.APIVersion, b.Kind)
	}
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Errorf("binding %+v does not deny with policy %s", b.Spec, p.Name)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", p.Spec.FailurePolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || strings.Join(rules[0].Resources, ",") != "pods" ||
		strings.Join(opStrings(rules[0].Operations), ",") != "CREATE,UPDATE" {
		t.Errorf("rules %+v, want pods on CREATE and UPDATE", rules)
	}
}

func opStrings(ops []admissionv1.OperationType) []string {
	var out []string
	for _, o := range ops {
		out = append(out, string(o))
	}
	return out
}

// celEnv is the part of the API server's CEL environment the policy uses:
// its variables (as dynamic values) and the strings extension
// (lowerAscii). The API server's own compile, with typed objects, is the
// cluster tier's, which applies the policy.
func celEnv(t *testing.T) *cel.Env {
	t.Helper()
	return celtest.Env(t, false, "object", "oldObject", "namespaceObject", "request")
}

// eval is celtest.Eval.
func eval(t *testing.T, env *cel.Env, expr string, vars map[string]any) any {
	t.Helper()
	return celtest.Eval(t, env, expr, vars)
}

// admitted runs the policy on a pod as the API server would: the pod is
// denied when every match condition holds and a validation fails.
func admitted(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, vars map[string]any) (bool, string) {
	t.Helper()
	env := celEnv(t)
	for _, mc := range p.Spec.MatchConditions {
		if eval(t, env, mc.Expression, vars) != true {
			return true, ""
		}
	}
	for _, v := range p.Spec.Validations {
		if eval(t, env, v.Expression, vars) != true {
			msg, _ := eval(t, env, v.MessageExpression, vars).(string)
			return false, msg
		}
	}
	return true, ""
}

// TestPolicyDecides checks that the policy's expressions compile and
// decide as intended: any case of "true" is what the plugin acts on, so
// it is what needs the label.
func TestPolicyDecides(t *testing.T) {
	p, _ := policy(t)
	labelled := map[string]any{"metadata": map[string]any{"name": "ml", "labels": map[string]any{"rdma-chain.github.io/smcr-allowed": "true"}}}
	labelledOld := map[string]any{"metadata": map[string]any{"name": "ml", "labels": map[string]any{"rdma-chain.io/smcr-allowed": "true"}}}
	nsLabels := func(l map[string]any) map[string]any { return map[string]any{"metadata": map[string]any{"labels": l}} }
	other := map[string]any{"metadata": map[string]any{"name": "web", "labels": map[string]any{"team": "web"}}}
	bare := map[string]any{"metadata": map[string]any{"name": "bare"}}
	pod := func(annotations map[string]any) map[string]any {
		md := map[string]any{"name": "p"}
		if annotations != nil {
			md["annotations"] = annotations
		}
		return map[string]any{"metadata": md}
	}
	smcr := func(v string) map[string]any { return map[string]any{"network.alibabacloud.com/erdma-smcr": v} }
	for _, tc := range []struct {
		name  string
		pod   map[string]any
		ns    map[string]any
		allow bool
	}{
		{"labelled namespace asks", pod(smcr("true")), labelled, true},
		{"namespace labelled by the old name asks", pod(smcr("true")), labelledOld, true},
		{"new label false, old true", pod(smcr("true")), nsLabels(map[string]any{"rdma-chain.github.io/smcr-allowed": "false", "rdma-chain.io/smcr-allowed": "true"}), true},
		{"old label not true", pod(smcr("true")), nsLabels(map[string]any{"rdma-chain.io/smcr-allowed": "yes"}), false},
		{"another prefix", pod(smcr("true")), nsLabels(map[string]any{"rdma-chain/smcr-allowed": "true"}), false},
		{"other namespace asks", pod(smcr("true")), other, false},
		{"other namespace asks in capitals", pod(smcr("TRUE")), other, false},
		{"unlabelled namespace asks", pod(smcr("True")), bare, false},
		{"other namespace says false", pod(smcr("false")), other, true},
		{"other namespace, a value the plugin ignores", pod(smcr("yes")), other, true},
		{"no annotations", pod(nil), other, true},
		{"other annotations", pod(map[string]any{"a": "b"}), bare, true},
		{"label not true", pod(smcr("true")), nsLabels(map[string]any{"rdma-chain.github.io/smcr-allowed": "yes"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.pod, "oldObject": nil, "namespaceObject": tc.ns,
				"request": map[string]any{"namespace": "ns1", "operation": "CREATE"}}
			got, msg := admitted(t, p, vars)
			if got != tc.allow {
				t.Errorf("admitted = %v, want %v", got, tc.allow)
			}
			if !got && (!strings.Contains(msg, "namespace ns1 may not set network.alibabacloud.com/erdma-smcr") ||
				!strings.Contains(msg, "rdma-chain.github.io/smcr-allowed=true")) {
				t.Errorf("message %q", msg)
			}
		})
	}
}
