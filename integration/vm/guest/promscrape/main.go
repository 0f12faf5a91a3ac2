// Command promscrape is a guest tool of the VM tier: it fetches a
// Prometheus /metrics endpoint over HTTP, parses it with the Prometheus
// text parser (github.com/prometheus/common/expfmt) and prints one line per
// sample, `name{label="value",...} value`, sorted, then a summary line. It
// exits 1 when the fetch or the parse fails.
//
//	promscrape http://127.0.0.1:9742/metrics
package main

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: promscrape URL")
		os.Exit(2)
	}
	lines, err := scrape(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "promscrape:", err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

func scrape(url string) ([]string, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var out []string
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			out = append(out, samples(name, f.GetType(), m)...)
		}
	}
	sort.Strings(out)
	return append(out, fmt.Sprintf("# promscrape: %d families, %d samples, content type %s", len(fams), len(out), resp.Header.Get("Content-Type"))), nil
}

func samples(name string, t dto.MetricType, m *dto.Metric) []string {
	labels := func(extra ...string) string {
		var kv []string
		for _, l := range m.GetLabel() {
			kv = append(kv, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		kv = append(kv, extra...)
		if len(kv) == 0 {
			return ""
		}
		return "{" + strings.Join(kv, ",") + "}"
	}
	switch t {
	case dto.MetricType_COUNTER:
		return []string{fmt.Sprintf("%s%s %g", name, labels(), m.GetCounter().GetValue())}
	case dto.MetricType_GAUGE:
		return []string{fmt.Sprintf("%s%s %g", name, labels(), m.GetGauge().GetValue())}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []string{fmt.Sprintf("%s_count%s %d", name, labels(), h.GetSampleCount()),
			fmt.Sprintf("%s_sum%s %g", name, labels(), h.GetSampleSum())}
		for _, b := range h.GetBucket() {
			out = append(out, fmt.Sprintf("%s_bucket%s %d", name, labels(fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound()))), b.GetCumulativeCount()))
		}
		return out
	default:
		return []string{fmt.Sprintf("%s%s %g", name, labels(), m.GetUntyped().GetValue())}
	}
}
