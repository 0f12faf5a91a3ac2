package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var updateRules = flag.Bool("update-rules", false, "rewrite monitoring/prometheusrule.yaml from monitoring/rdma-chain.rules.yaml")

const rulesHeader = `# Generated from rdma-chain.rules.yaml (the rules' one source): do not edit;
# edit that file and run: cd deploy && go test -run TestAlertRulesAgree -update-rules
# The monitoring component applies it: a Prometheus Operator's Prometheus
# loads it when its ruleSelector (and ruleNamespaceSelector) select it.
`

// TestAlertRulesAgree checks that the PrometheusRule the monitoring
// component applies has the rules file's groups, as generated from it.
func TestAlertRulesAgree(t *testing.T) {
	want := prometheusRule(t)
	path := filepath.Join("monitoring", "prometheusrule.yaml")
	if *updateRules {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not generated from monitoring/rdma-chain.rules.yaml: run go test -run TestAlertRulesAgree -update-rules", path)
	}
}

// prometheusRule is the PrometheusRule of monitoring/rdma-chain.rules.yaml,
// read strictly (groups and nothing else at the top).
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("monitoring", "rdma-chain.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil || len(rules.Groups) == 0 {
		t.Fatalf("rdma-chain.rules.yaml: %v, %d groups", err, len(rules.Groups))
	}
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
		"metadata": map[string]any{"name": "rdma-chain", "namespace": "kube-system", "labels": map[string]string{"app": "rdma-chain"}},
		"spec":     map[string]any{"groups": rules.Groups},
	})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(rulesHeader), out...)
}

// TestEveryAlertFiresAndResolves checks that the promtool test file
// has, for every alert of the rules file, a test in which it fires at
// one evaluation and is gone at a later one (promtool checks that it
// does; this checks that no alert is left out).
func TestEveryAlertFiresAndResolves(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("monitoring", "rdma-chain.rules.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Evals []struct {
				EvalTime  string           `json:"eval_time"`
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "rdma-chain.rules.yaml" {
		t.Errorf("rule_files %v, want the rules file", tests.RuleFiles)
	}
	cycled := map[string]bool{}
	for _, ts := range tests.Tests {
		fired := map[string]time.Duration{}
		for _, e := range ts.Evals {
			at, err := time.ParseDuration(e.EvalTime)
			if err != nil {
				t.Fatalf("eval_time %q: %v", e.EvalTime, err)
			}
			first, ok := fired[e.Alertname]
			switch {
			case len(e.ExpAlerts) > 0 && !ok:
				fired[e.Alertname] = at
			case len(e.ExpAlerts) == 0 && ok && at > first:
				cycled[e.Alertname] = true
			}
		}
	}
	for _, name := range alertNames(t) {
		if !cycled[name] {
			t.Errorf("no test in which %s fires and then resolves", name)
		}
	}
}

// alertNames are the alerts of monitoring/rdma-chain.rules.yaml.
func alertNames(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("monitoring", "rdma-chain.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no alert in the rules file")
	}
	return out
}
