package docs

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
)

// TestMetricsTable checks that the metrics table of operations.md lists
// every metric reconcile registers (pkg/metrics) with its labels, and
// nothing else.
func TestMetricsTable(t *testing.T) {
	doc, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	reg := registeredMetrics(t)
	if len(reg) < 20 {
		t.Fatalf("only %d metrics registered: reading pkg/metrics is broken", len(reg))
	}
	for _, msg := range metricsProblems(string(doc), reg) {
		t.Error(msg)
	}
}

// TestMetricsTableFails checks that the check finds a metric missing
// from the table, one the table has and pkg/metrics does not, and
// labels that differ.
func TestMetricsTableFails(t *testing.T) {
	reg := map[string][]string{"rdma_chain_a": {"device", "port"}, "rdma_chain_b": nil}
	for _, c := range []struct{ name, doc, want string }{
		{"complete", "| `rdma_chain_a` | gauge | `device`, `port` (+ pod labels) | a |\n| `rdma_chain_b` | counter | | b |\n", ""},
		{"missing", "| `rdma_chain_a` | gauge | `device`, `port` | a |\n", "does not list rdma_chain_b"},
		{"unknown", "| `rdma_chain_a` | gauge | `device`, `port` | a |\n| `rdma_chain_b` | counter | | b |\n| `rdma_chain_c` | gauge | | c |\n", "lists rdma_chain_c"},
		{"labels", "| `rdma_chain_a` | gauge | `device` | a |\n| `rdma_chain_b` | counter | | b |\n", "labels [device], pkg/metrics [device port]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := metricsProblems(c.doc, reg)
			if c.want == "" && len(got) > 0 || c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)) {
				t.Errorf("problems %q, want one saying %q", got, c.want)
			}
		})
	}
}

// metricRow is a row of the metrics table: its name, then its labels
// (code spans before "(+ pod labels)").
var metricRow = regexp.MustCompile("(?m)^\\| `(rdma_chain_[a-z0-9_]+)` \\| [a-z]+ \\|([^|]*)\\|")

// metricsProblems compares the table rows of doc with reg.
func metricsProblems(doc string, reg map[string][]string) []string {
	var out []string
	listed := map[string]bool{}
	for _, m := range metricRow.FindAllStringSubmatch(doc, -1) {
		name := m[1]
		listed[name] = true
		want, ok := reg[name]
		if !ok {
			out = append(out, fmt.Sprintf("operations.md lists %s, which pkg/metrics does not register", name))
			continue
		}
		labels, _, _ := strings.Cut(m[2], "(+")
		var got []string
		for _, s := range codeSpan.FindAllStringSubmatch(labels, -1) {
			got = append(got, s[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			out = append(out, fmt.Sprintf("operations.md gives %s the labels %v, pkg/metrics %v", name, got, want))
		}
	}
	for name := range reg {
		if !listed[name] {
			out = append(out, fmt.Sprintf("operations.md does not list %s in its metrics table", name))
		}
	}
	slices.Sort(out)
	return out
}

// descFields are a Desc's name and variable labels as Desc.String has them.
var descFields = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// registeredMetrics are the metrics reconcile serves and their labels
// (without --metrics-pod-labels), sorted: its counters, the node
// collector's descriptions and the build info.
func registeredMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 200)
	node := metrics.NewNodeCollector(nil, func() []conflist.Network { return nil }, nil, false)
	usage := metrics.NewUsageCollector(nil, func() []conflist.Network { return nil }, false)
	for _, c := range append(metrics.NewReconcile().Collectors(), node, usage) {
		c.Describe(ch)
	}
	close(ch)
	out := map[string][]string{"rdma_chain_ops_build_info": {"version"}}
	for d := range ch {
		m := descFields.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// TestAlertsListed checks that operations.md's alerts table has a row
// for every alert of the rules file, and for no other.
func TestAlertsListed(t *testing.T) {
	doc, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../deploy/monitoring/rdma-chain.rules.yaml")
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
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
		}
	}
	rows := map[string]bool{}
	for _, m := range alertRow.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = true
		if !alerts[m[1]] {
			t.Errorf("operations.md lists alert %s, which the rules file has not", m[1])
		}
	}
	for a := range alerts {
		if !rows[a] {
			t.Errorf("operations.md has no runbook row for alert %s", a)
		}
	}
	if len(alerts) < 5 {
		t.Errorf("only %d alerts read from the rules file", len(alerts))
	}
}

// alertRow is a row of the alerts table: the alert's name first.
var alertRow = regexp.MustCompile("(?m)^\\| `(RdmaChain[A-Za-z]+)` \\|")
