package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fakeStats is an exclusive-mode node: mlx5_0 on the host, mlx5_1 in pod
// netns /run/netns/x, SMC with one host pnet entry, an SMC-R pod /run/netns/s
// with fallbacks.
type fakeStats struct {
	mode    rdma.Mode
	podErr  error
	hookErr error
	smcErr  error
	offer   smc.Offer
}

func (f *fakeStats) NetnsMode() (rdma.Mode, error) { return f.mode, nil }
func (f *fakeStats) PortStats(ns string) ([]rdma.PortStats, error) {
	switch ns {
	case "":
		return []rdma.PortStats{{Device: "mlx5_0", Port: 1, State: "ACTIVE", PhysState: "LinkUp",
			Counters: map[string]float64{"port_xmit_data": 10}, HWCounters: map[string]float64{"out_of_buffer": 2}}}, nil
	case "/run/netns/x":
		return []rdma.PortStats{{Device: "mlx5_1", Port: 1, State: "ACTIVE", PhysState: "LinkUp",
			Counters: map[string]float64{"port_rcv_data": 7}}}, f.podErr
	}
	return nil, nil
}
func (f *fakeStats) Pnet(ns string) ([]smc.PnetEntry, error) {
	if f.smcErr != nil {
		return nil, f.smcErr
	}
	return []smc.PnetEntry{{PnetID: "P", IBName: "mlx5_0", IBPort: 1}}, nil
}
func (f *fakeStats) Fallbacks(ns string) (smc.FallbackReport, error) {
	return smc.FallbackReport{ClientTotal: 3, Reasons: []smc.FallbackStat{{Reason: 0x03030000, Count: 3}}}, nil
}
func (f *fakeStats) SocketHook() (hookmap.Status, error) {
	return hookmap.Status{Attached: true, Held: true, Listed: []uint32{4026532000}}, f.hookErr
}
func (f *fakeStats) SMCOffer() smc.Offer { return f.offer }
func (f *fakeStats) NetnsGone(r *state.Record) (bool, error) {
	return r.NetNS == "/run/netns/dead", nil
}

// statsNode writes the records the fake node's collector reads.
func statsNode(t *testing.T) []conflist.Network {
	dir := t.TempDir()
	recs := []*state.Record{
		{Network: "rdmanet", ContainerID: "x", IfName: "eth0", NetNS: "/run/netns/x", Mode: "exclusive",
			Pod:   state.Pod{Namespace: "default", Name: "px", UID: "u-x"},
			Links: []state.Link{{Device: "mlx5_1", Kind: state.LinkMoved, Step: state.StepDone, RDMAMoved: true}}},
		{Network: "rdmanet", ContainerID: "s", IfName: "eth0", NetNS: "/run/netns/s", Mode: "exclusive",
			Pod:   state.Pod{Namespace: "default", Name: "ps"},
			Links: []state.Link{{Device: "mlx5_2", Kind: state.LinkMoved, Step: state.StepDone}}, SMC: &state.SMC{PnetID: "P"}},
		{Network: "rdmanet", ContainerID: "d", IfName: "eth0", NetNS: "/run/netns/dead", Mode: "exclusive",
			Links: []state.Link{{Device: "mlx5_3", Kind: state.LinkMoved, Step: state.StepDone}}},
		{Network: "othernet", ContainerID: "o", IfName: "eth0", NetNS: "/run/netns/o"},
	}
	for _, id := range []string{"r1", "r2"} { // podSoftRoCE pods: one series for both
		recs = append(recs, &state.Record{Network: "rdmanet", ContainerID: id, IfName: "eth0", NetNS: "/run/netns/" + id, Mode: "shared",
			Links: []state.Link{{Device: "rxe_" + id, Kind: state.LinkMACVlan, Step: state.StepDone, SoftRoCE: true}}})
	}
	for _, r := range recs {
		if err := state.New(dir).Put(r); err != nil {
			t.Fatal(err)
		}
	}
	return []conflist.Network{{Name: "rdmanet", DataDir: dir}}
}

func TestNodeCollector(t *testing.T) {
	nets := statsNode(t)
	offer := smc.Offer{SMC: true, TCP2SMC: true, SocketHookError: "no BTF"}
	c := NewNodeCollector(&fakeStats{mode: rdma.ModeExclusive, hookErr: hookcmd.ErrNotInstalled, offer: offer}, func() []conflist.Network { return nets }, nil, false)
	want := `
# HELP rdma_chain_attachments Recorded attachments, by network, mode (shared, exclusive, pass-through) and RDMA device (none: no link; pod-rxe: the pods' own soft-RoCE devices of podSoftRoCE).
# TYPE rdma_chain_attachments gauge
rdma_chain_attachments{device="pod-rxe",mode="shared",network="rdmanet"} 2
rdma_chain_attachments{device="mlx5_1",mode="exclusive",network="rdmanet"} 1
rdma_chain_attachments{device="mlx5_2",mode="exclusive",network="rdmanet"} 1
rdma_chain_attachments{device="mlx5_3",mode="exclusive",network="rdmanet"} 1
# HELP rdma_chain_rdma_port_info Always 1 per RDMA port; labels: its state and physical state as sysfs names them, and the netns holding the device (host or pod).
# TYPE rdma_chain_rdma_port_info gauge
rdma_chain_rdma_port_info{device="mlx5_0",netns="host",phys_state="LinkUp",port="1",state="ACTIVE"} 1
rdma_chain_rdma_port_info{device="mlx5_1",netns="pod",phys_state="LinkUp",port="1",state="ACTIVE"} 1
# HELP rdma_chain_rdma_port_counters_total The port's counters (sysfs ports/N/counters), by counter file name, wherever the device is.
# TYPE rdma_chain_rdma_port_counters_total counter
rdma_chain_rdma_port_counters_total{counter="port_rcv_data",device="mlx5_1",port="1"} 7
rdma_chain_rdma_port_counters_total{counter="port_xmit_data",device="mlx5_0",port="1"} 10
# HELP rdma_chain_rdma_port_hw_counters_total The port's driver counters (sysfs ports/N/hw_counters, without lifespan), by counter file name, wherever the device is.
# TYPE rdma_chain_rdma_port_hw_counters_total counter
rdma_chain_rdma_port_hw_counters_total{counter="out_of_buffer",device="mlx5_0",port="1"} 2
# HELP rdma_chain_smc_pnet_entries Entries of the host netns's SMC-R pnet table.
# TYPE rdma_chain_smc_pnet_entries gauge
rdma_chain_smc_pnet_entries 1
# HELP rdma_chain_smc_pod_fallbacks SMC connections that fell back to TCP in the netns of live SMC-R pods, summed over those pods, by side (client, server) and SMC decline reason code.
# TYPE rdma_chain_smc_pod_fallbacks gauge
rdma_chain_smc_pod_fallbacks{reason="0x03030000",side="client"} 3
# HELP rdma_chain_smc_transparent_info Always 1; mechanism is how SMC-R pods' TCP sockets become SMC sockets under smcr.transparent auto on this node (tcp2smc, socket_hook, none, no_smc), offer what the kernel offers (docs/kernels.md).
# TYPE rdma_chain_smc_transparent_info gauge
rdma_chain_smc_transparent_info{mechanism="tcp2smc",offer="smc,tcp2smc"} 1
` + collectErrorsText(0, 0)
	names := []string{"rdma_chain_smc_transparent_info", "rdma_chain_attachments", "rdma_chain_rdma_port_info", "rdma_chain_rdma_port_counters_total",
		"rdma_chain_rdma_port_hw_counters_total", "rdma_chain_smc_pnet_entries", "rdma_chain_smc_pod_fallbacks",
		"rdma_chain_collect_errors", "rdma_chain_smc_socket_hook_attached"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// collectErrorsText is the exposition of rdma_chain_collect_errors with
// these pods and socket_hook errors and no others.
func collectErrorsText(pods, hook int) string {
	return fmt.Sprintf(`# HELP rdma_chain_collect_errors Things this scrape could not read, by source (rdma, records, outcomes, smc, socket_hook, pods); the reconcile log does not repeat them.
# TYPE rdma_chain_collect_errors gauge
rdma_chain_collect_errors{source="outcomes"} 0
rdma_chain_collect_errors{source="pods"} %d
rdma_chain_collect_errors{source="rdma"} 0
rdma_chain_collect_errors{source="records"} 0
rdma_chain_collect_errors{source="smc"} 0
rdma_chain_collect_errors{source="socket_hook"} %d
`, pods, hook)
}

// TestNodeCollectorErrorsAndPodLabels checks that what cannot be read is
// counted by source, and --metrics-pod-labels names the pod on per-pod
// series only.
func TestNodeCollectorErrorsAndPodLabels(t *testing.T) {
	nets := statsNode(t)
	f := &fakeStats{mode: rdma.ModeExclusive, podErr: errors.New("mount"), hookErr: errors.New("exit 1")}
	c := NewNodeCollector(f, func() []conflist.Network { return nets }, nil, true)
	want := `
# HELP rdma_chain_smc_pod_fallbacks SMC connections that fell back to TCP in the netns of live SMC-R pods, summed over those pods, by side (client, server) and SMC decline reason code.
# TYPE rdma_chain_smc_pod_fallbacks gauge
rdma_chain_smc_pod_fallbacks{namespace="default",pod="ps",reason="0x03030000",side="client"} 3
# HELP rdma_chain_rdma_port_info Always 1 per RDMA port; labels: its state and physical state as sysfs names them, and the netns holding the device (host or pod).
# TYPE rdma_chain_rdma_port_info gauge
rdma_chain_rdma_port_info{device="mlx5_0",namespace="",netns="host",phys_state="LinkUp",pod="",port="1",state="ACTIVE"} 1
rdma_chain_rdma_port_info{device="mlx5_1",namespace="default",netns="pod",phys_state="LinkUp",pod="px",port="1",state="ACTIVE"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rdma_chain_smc_pod_fallbacks", "rdma_chain_rdma_port_info"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	errs := collectErrorsText(1, 1)
	if err := testutil.CollectAndCompare(c, strings.NewReader(errs), "rdma_chain_collect_errors"); err != nil {
		t.Error(err)
	}
	f.smcErr = smc.ErrUnavailable // no SMC: no SMC series, no error
	if n := testutil.CollectAndCount(c, "rdma_chain_smc_pnet_entries", "rdma_chain_smc_socket_hook_attached"); n != 0 {
		t.Errorf("%d SMC series without SMC", n)
	}
	noSMC := `# HELP rdma_chain_smc_transparent_info Always 1; mechanism is how SMC-R pods' TCP sockets become SMC sockets under smcr.transparent auto on this node (tcp2smc, socket_hook, none, no_smc), offer what the kernel offers (docs/kernels.md).
# TYPE rdma_chain_smc_transparent_info gauge
rdma_chain_smc_transparent_info{mechanism="no_smc",offer="no_smc"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(noSMC), "rdma_chain_smc_transparent_info"); err != nil {
		t.Errorf("without SMC: %v", err)
	}
}

// TestMetricsLint checks that every metric reconcile serves passes
// client_golang's promlint (names, units, help, counter suffixes).
func TestMetricsLint(t *testing.T) {
	nets := statsNode(t)
	m := NewReconcile()
	m.RepairSeconds.Observe(0.4)
	m.Repairs.WithLabelValues("rdmanet", TriggerEvent).Inc()
	m.Releases.WithLabelValues("rdmanet", ReasonNetnsGone).Inc()
	m.ReleaseFailures.WithLabelValues("rdmanet").Inc()
	m.RepairFailures.WithLabelValues("rdmanet").Inc()
	m.Passes.WithLabelValues(TriggerInterval).Inc()
	m.Events.WithLabelValues("rtnetlink").Inc()
	m.Watching.WithLabelValues("rdma").Set(0)
	tail := NewOutcomeTail()
	tail.counts[outcomeKey{"rdmanet", "ADD", "0"}] = 1
	reg, err := NewRegistry("test", m, NewNodeCollector(&fakeStats{mode: rdma.ModeExclusive}, func() []conflist.Network { return nets }, tail, false))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) < 20 {
		t.Errorf("only %d metric families gathered", len(fams))
	}
}

// TestServeMetrics tests the endpoint over real HTTP, parsed by the
// Prometheus text parser.
func TestServeMetrics(t *testing.T) {
	nets := statsNode(t)
	var out bytes.Buffer
	reg, err := NewRegistry("v-test", NewReconcile(), NewNodeCollector(&fakeStats{mode: rdma.ModeShared}, func() []conflist.Network { return nets }, NewOutcomeTail(), false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Serve(ctx, "127.0.0.1:0", reg, nil, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no address logged: %s", out.String())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	bi := fams["rdma_chain_ops_build_info"]
	if bi == nil || bi.GetMetric()[0].GetLabel()[0].GetValue() != "v-test" {
		t.Errorf("build info %v", bi)
	}
	if f := fams["rdma_chain_rdma_netns_mode"]; f == nil || f.GetMetric()[0].GetLabel()[0].GetValue() != "shared" {
		t.Errorf("netns mode %v", f)
	}
	if err := Serve(ctx, m[1], reg, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a taken address did not fail")
	}
}

// TestOutcomeTail checks that lines already in the log when the process
// starts are never counted (a restart does not count them again); new ones
// are, once, also across the plugin's compaction of the log.
func TestOutcomeTail(t *testing.T) {
	dir := t.TempDir()
	nets := []conflist.Network{{Name: "rdmanet", DataDir: dir}}
	rec := func(verb string, code uint, pod string) {
		e := outcome.Entry{Verb: verb, Network: "rdmanet", Pod: pod, ContainerID: "c-" + pod, Code: code}
		if code != 0 {
			e.Msg = "failed"
		}
		if err := outcome.Record(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	rec("ADD", 0, "before")
	tail := NewOutcomeTail()
	if counts, errs := tail.Poll(nets); len(counts) != 0 || errs != 0 {
		t.Fatalf("counted what was there before: %v (%d errors)", counts, errs)
	}
	rec("ADD", 0, "a")
	rec("ADD", 103, "b")
	rec("DEL", 0, "a")
	rec("STATUS", 0, "")
	if err := outcome.Record(dir, outcome.Entry{Verb: "FROB", Network: "elsewhere", Code: 9999, Msg: "x"}); err != nil {
		t.Fatal(err)
	}
	counts, _ := tail.Poll(nets)
	want := map[outcomeKey]float64{{"rdmanet", "ADD", "0"}: 1, {"rdmanet", "ADD", "103"}: 1, {"rdmanet", "DEL", "0"}: 1,
		{"rdmanet", "STATUS", "0"}: 1, {"other", "other", "other"}: 1}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	// Enough lines to make the plugin compact the log (a new inode).
	st0, _ := os.Stat(filepath.Join(dir, outcome.FileName))
	n := 0
	for ; ; n++ {
		rec("DEL", 0, fmt.Sprintf("p%04d", n))
		st, err := os.Stat(filepath.Join(dir, outcome.FileName))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(st0, st) {
			n++
			break
		}
		if n%97 == 0 {
			tail.Poll(nets) // some seen before the compaction, some not
		}
	}
	rec("CHECK", 106, "late")
	counts, _ = tail.Poll(nets)
	if got := counts[outcomeKey{"rdmanet", "DEL", "0"}]; got != float64(n+1) {
		t.Errorf("DEL ok counted %v times, want %d (once each across the compaction)", got, n+1)
	}
	if got := counts[outcomeKey{"rdmanet", "CHECK", "106"}]; got != 1 {
		t.Errorf("CHECK 106 counted %v, want 1", got)
	}
	// A restart: a new tail counts nothing of what is there.
	if counts, _ := NewOutcomeTail().Poll(nets); len(counts) != 0 {
		t.Errorf("a restarted tail counted %v", counts)
	}
}

// TestServeBindsExactlyWhatWasAsked checks that 0.0.0.0 listens on IPv4
// only (with "tcp" Go listens on [::] as well, which an IPv4 firewall
// rule misses).
func TestServeBindsExactlyWhatWasAsked(t *testing.T) {
	reg, err := NewRegistry("v", NewReconcile(), NewNodeCollector(&fakeStats{}, func() []conflist.Network { return nil }, nil, false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	if err := Serve(ctx, "0.0.0.0:0", reg, nil, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`msg="serving metrics" url=http://0\.0\.0\.0:\d+/metrics`).MatchString(out.String()) {
		t.Errorf("listening on %s, want 0.0.0.0 only", out.String())
	}
	for addr, want := range map[string]string{"0.0.0.0:9742": "tcp4", "10.0.0.1:1": "tcp4", "[::]:9742": "tcp6", "[fd00::1]:1": "tcp6", "localhost:9742": "tcp", ":9742": "tcp"} {
		if got := listenNetwork(addr); got != want {
			t.Errorf("listenNetwork(%s) = %s, want %s", addr, got, want)
		}
	}
}

// slowCollector counts its collections and how many run at once.
type slowCollector struct {
	desc              *prometheus.Desc
	running, max, all atomic.Int32
}

func (c *slowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *slowCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.running.Add(1)
	defer c.running.Add(-1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	c.all.Add(1)
	time.Sleep(50 * time.Millisecond) // a collection that enters pod netns takes time
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// TestConcurrentScrapes checks that 50 scrapes at once run at most one
// collection at a time, and the cached result answers those that waited;
// /healthz says what the health check says.
func TestConcurrentScrapes(t *testing.T) {
	c := &slowCollector{desc: prometheus.NewDesc("rdma_chain_test", "test", nil, nil)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	sick := errors.New("CRI at /run/cri.sock unreachable for 3m0s")
	if err := Serve(ctx, "127.0.0.1:0", reg, func() error { return sick }, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	addr := regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(out.String())[1]
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				errs <- err
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "rdma_chain_test 1") {
				errs <- fmt.Errorf("status %d: %s", resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := c.max.Load(); m != 1 {
		t.Errorf("%d collections ran at once, want 1", m)
	}
	if n := c.all.Load(); n < 1 || n >= 50 {
		t.Errorf("%d collections for 50 concurrent scrapes, want the cache to answer most", n)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), sick.Error()) {
		t.Errorf("/healthz: %d %s", resp.StatusCode, body)
	}
}
