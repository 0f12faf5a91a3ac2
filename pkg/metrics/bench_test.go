package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// benchPods is the pods of a full node (kubelet's default maxPods).
const benchPods = 110

// benchStats is a shared-mode node with SMC: its ports read by pkg/rdma
// from a sysfs tree on disk (two soft-RoCE-like devices, GID tables of
// 1,024 rows each), the SMC and socket hook answers faked.
type benchStats struct {
	fakeStats
	sys *rdma.System
}

func (b *benchStats) PortStats(ns string) ([]rdma.PortStats, error) { return b.sys.PortStats() }
func (b *benchStats) NetnsGone(*state.Record) (bool, error)         { return false, nil }

// benchSysfs writes devices rxe0 and rxe1 with one port each: state,
// rate, 1,024 GID rows (used: two of the device's own and two per pod on
// rxe0), 10 counters and 20 hw_counters.
func benchSysfs(b *testing.B, root string, pods int) {
	b.Helper()
	write := func(rel, data string) {
		p := filepath.Join(root, "class/infiniband", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for d, used := range []int{2 + 2*pods, 2} {
		port := fmt.Sprintf("rxe%d/ports/1/", d)
		write(port+"state", "4: ACTIVE")
		write(port+"phys_state", "5: LinkUp")
		write(port+"rate", "100 Gb/sec (4X EDR)")
		for i := range 1024 {
			g := zeroGIDRow
			if i < used {
				g = fmt.Sprintf("fd00:0000:0000:0000:0000:0000:%04x:%04x", i>>16, i&0xffff)
			}
			write(port+"gids/"+strconv.Itoa(i), g)
		}
		for i := range 10 {
			write(fmt.Sprintf("%scounters/counter_%d", port, i), strconv.Itoa(i*1000))
		}
		for i := range 20 {
			write(fmt.Sprintf("%shw_counters/hw_counter_%d", port, i), strconv.Itoa(i*7))
		}
	}
}

const zeroGIDRow = "0000:0000:0000:0000:0000:0000:0000:0000"

// benchNode writes the records of pods shared-mode pods (every other one
// with SMC-R) and an outcome log of their ADDs.
func benchNode(b *testing.B, dir string, pods int) []conflist.Network {
	b.Helper()
	for i := range pods {
		r := &state.Record{Network: "rdmanet", ContainerID: fmt.Sprintf("c%03d", i), IfName: "eth0", Mode: "shared",
			NetNS: fmt.Sprintf("/run/netns/pod%03d", i), Pod: state.Pod{Namespace: "default", Name: fmt.Sprintf("pod%03d", i), UID: fmt.Sprintf("u%03d", i)},
			Links: []state.Link{{Device: "rxe0", Kind: state.LinkIPVlan, Step: state.StepDone}}}
		if i%2 == 0 {
			r.SMC = &state.SMC{PnetID: "P", Device: "rxe0", IBPort: 1, PodIfName: "eth0"}
		}
		if err := state.New(dir).Put(r); err != nil {
			b.Fatal(err)
		}
		if err := outcome.Record(dir, outcome.Entry{Verb: "ADD", Network: "rdmanet", ContainerID: r.ContainerID, Pod: "default/" + r.Pod.Name}); err != nil {
			b.Fatal(err)
		}
	}
	return []conflist.Network{{Name: "rdmanet", DataDir: dir}}
}

// BenchmarkScrape measures GET /metrics of reconcile's registry on a node
// with 110 attached pods (records and outcome log on disk, read as
// reconcile reads them; ports from a sysfs tree on disk), without the 2 s
// cache: the time and the memory allocated per scrape, printed beside the
// target (under 50 ms and 5 MB). One ADD outcome is appended between
// scrapes, as on a node with churn. Rows go to RC_BENCH_OUT for
// scripts/bench.sh; run with -benchtime=1x.
func BenchmarkScrape(b *testing.B) {
	const samples = 60
	for range b.N {
		root, dir := b.TempDir(), b.TempDir()
		benchSysfs(b, root, benchPods)
		nets := benchNode(b, dir, benchPods)
		stats := &benchStats{fakeStats: fakeStats{mode: rdma.ModeShared, offer: smc.Offer{SMC: true, SocketHook: true}}, sys: &rdma.System{SysRoot: root}}
		node := NewNodeCollector(stats, func() []conflist.Network { return nets }, NewOutcomeTail(), false)
		reg, err := NewRegistry("bench", NewReconcile(), node)
		if err != nil {
			b.Fatal(err)
		}
		h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
		scrape := func() int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK {
				b.Fatalf("GET /metrics: %d", rec.Code)
			}
			return rec.Body.Len()
		}
		for range 5 { // the outcome log's first sight, and warm caches
			scrape()
		}
		var ms, cpu, mb []float64
		size := 0
		for i := range samples {
			if err := outcome.Record(dir, outcome.Entry{Verb: "ADD", Network: "rdmanet", ContainerID: fmt.Sprintf("n%03d", i)}); err != nil {
				b.Fatal(err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0, start := processCPU(), time.Now()
			size = scrape()
			ms = append(ms, float64(time.Since(start))/1e6)
			cpu = append(cpu, float64(processCPU()-cpu0)/1e6)
			runtime.ReadMemStats(&m1)
			mb = append(mb, float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20))
		}
		medMS, p95MS, medMB := quantile(ms, 0.5), quantile(ms, 0.95), quantile(mb, 0.5)
		verdict := "met"
		if medMS >= 50 || medMB >= 5 {
			verdict = "**missed**"
		}
		b.ReportMetric(medMS, "median-ms")
		b.ReportMetric(medMB, "MB/scrape")
		testenv.BenchRow(b, fmt.Sprintf("| metrics scrape, %d attached pods (shared, half SMC-R; records, outcome log and 2 ports' sysfs on disk) | %.3g ms | %.3g ms | | | < 50 ms, < 5 MB | %s | CPU median %.3g ms; %.2f MB allocated per scrape (median); %d bytes of text; no cache |\n",
			benchPods, medMS, p95MS, verdict, quantile(cpu, 0.5), medMB, size))
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quantile is v's p-quantile (nearest rank).
func quantile(v []float64, p float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1)+0.5)]
}
