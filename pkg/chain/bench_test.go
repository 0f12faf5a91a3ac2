package chain

import (
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// BenchmarkAddPassThrough measures the pass-through ADD, which every
// pod without RDMA pays: parse, one kubelet lookup (faked), print.
func BenchmarkAddPassThrough(b *testing.B) {
	w := &world{}
	p := w.plugin()
	args := cmd(b.TempDir(), "", prevResult100)
	b.ReportAllocs()
	for b.Loop() {
		w.stdout.Reset()
		w.stderr.Reset()
		w.calls = w.calls[:0]
		if err := p.Add(args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddDelShared measures a shared-mode ADD+DEL cycle with the
// kernel faked: the plugin's own cost (state writes, lock, selection,
// result conversion).
func BenchmarkAddDelShared(b *testing.B) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"1"}}}}
	p := w.plugin()
	dir := b.TempDir()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		args := cmd(dir, "", prevResult100)
		args.ContainerID = fmt.Sprintf("c%d", i)
		i++
		w.stdout.Reset()
		w.stderr.Reset()
		w.calls = w.calls[:0]
		if err := p.Add(args); err != nil {
			b.Fatal(err)
		}
		if err := p.Del(args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSelectDevices measures device selection over a node with
// many devices and IDs.
func BenchmarkSelectDevices(b *testing.B) {
	var offered []rdma.Device
	var ids []string
	for i := range 64 {
		offered = append(offered, rdma.Device{Name: fmt.Sprintf("mlx5_%d", i), Netdev: fmt.Sprintf("eth%d", i)})
		ids = append(ids, fmt.Sprintf("mlx5_%d", i))
	}
	req := &request{ids: ids}
	in := selectInput{mode: rdma.ModeShared, offered: offered}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := selectDevices(req, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddRecords measures ADD latency with 0, 50 and 200 attachment
// records on the node (shared mode without IPAM, kernel faked, real state
// files, none synced): the records a call reads must not make every ADD
// slower. Rows go to RC_BENCH_OUT for scripts/bench.sh; run with
// -benchtime=1x, the benchmark takes its own samples.
func BenchmarkAddRecords(b *testing.B) {
	const samples = 40
	for range b.N {
		var base []float64
		for _, records := range []int{0, 50, 200} {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
				allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"1"}}}}
			p := w.plugin()
			dir := b.TempDir()
			addOne := func(id string) *skel.CmdArgs {
				args := cmd(dir, "", prevResult100)
				args.ContainerID = id
				w.stdout.Reset()
				w.calls = w.calls[:0]
				if err := p.Add(args); err != nil {
					b.Fatal(err)
				}
				return args
			}
			for i := range records {
				addOne(fmt.Sprintf("node-%d", i))
			}
			if n := countRecords(b, dir); n != records {
				b.Fatalf("%d records on the node, want %d", n, records)
			}
			// Unmeasured rounds first: the first calls in a new state
			// directory (and, for the first count, in this process) pay
			// one-time costs that would flatter the larger counts.
			for i := range 40 {
				if err := p.Del(addOne(fmt.Sprintf("warm-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			var v, cpu []float64
			for i := range samples {
				cpu0, start := processCPU(), time.Now()
				args := addOne(fmt.Sprintf("probe-%d", i))
				v = append(v, float64(time.Since(start))/1e6)
				cpu = append(cpu, float64(processCPU()-cpu0)/1e6)
				if err := p.Del(args); err != nil {
					b.Fatal(err)
				}
			}
			if records == 0 {
				base = v
			}
			benchRow(b, benchLine{measure: fmt.Sprintf("ADD with %d records on the node (shared, faked kernel)", records),
				base: "0 records", note: "real state files, no IPAM: none synced"}, v, base, cpu)
		}
	}
}

// countRecords counts the attachment records under dataDir.
func countRecords(b *testing.B, dataDir string) int {
	b.Helper()
	n := 0
	err := filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".json") && strings.Contains(path, "attach") {
			n++
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// processCPU is the CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLine labels one row: what is measured, its baseline, a note, and
// per. A per above 1 divides the values by it and the baseline by baseDiv,
// for a per-unit cost.
type benchLine struct {
	measure, base, note string
	per, baseDiv        float64
}

func benchRow(b *testing.B, l benchLine, v, base, cpu []float64) {
	b.Helper()
	q := func(v []float64, p float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[int(p*float64(len(s)-1)+0.5)]
	}
	per, baseDiv := max(l.per, 1), max(l.baseDiv, 1)
	med, baseMed := q(v, 0.5), max(q(base, 0.5), 1e-9)
	ratio := (med / per) / (baseMed / baseDiv)
	met := "met"
	if ratio > 1.1 {
		met = "**missed**"
	}
	line := fmt.Sprintf("| %s | %.3g ms | %.3g ms | %s %.3g ms | %.2fx | <= 1.1x | %s | CPU median %.2f ms (%s) |\n",
		l.measure, med, q(v, 0.95), l.base, baseMed, ratio, met, q(cpu, 0.5), l.note)
	b.ReportMetric(med, "median-ms")
	testenv.BenchRow(b, line)
}

// BenchmarkAddDelDevices measures ADD+DEL of one pod granted 1, 4 and 8
// devices, in shared mode (an ipvlan child and an IPAM lease per device,
// podIPv6Block rendering each device's range) and exclusive mode (a netdev
// and a device moved per device), the kernel and the IPAM faked, real state
// files: the cost per device must stay flat (the ratio compares the
// per-device cost with one device's). Rows go to RC_BENCH_OUT for
// scripts/bench.sh; run with -benchtime=1x.
func BenchmarkAddDelDevices(b *testing.B) {
	const samples = 40
	for range b.N {
		for _, mode := range []rdma.Mode{rdma.ModeShared, rdma.ModeExclusive} {
			var base []float64
			for _, n := range []int{1, 4, 8} {
				v, cpu := addDelDevices(b, mode, n, samples)
				if n == 1 {
					base = v
				}
				benchRow(b, benchLine{measure: fmt.Sprintf("ADD+DEL, %d device(s) per pod (%s, faked kernel and IPAM)", n, mode),
					base: "1 device", note: "ratio per device; real state files, leases synced",
					per: float64(n)}, v, base, cpu)
			}
		}
	}
}

// addDelDevices measures samples ADD+DEL cycles of a pod granted n devices.
func addDelDevices(b *testing.B, mode rdma.Mode, n, samples int) (v, cpu []float64) {
	b.Helper()
	w := &world{mode: mode, prefixes: map[string][]netip.Prefix{}}
	var ids []string
	for i := range n {
		dev, nd := fmt.Sprintf("mlx5_%d", i), fmt.Sprintf("eth%d", i)
		w.devices = append(w.devices, rdma.Device{Name: dev, Driver: "mlx5_core", Netdev: nd})
		w.prefixes[nd] = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("fd00:%x::1/64", i+1))}
		ids = append(ids, dev)
	}
	w.allocs = []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: ids}}
	p := w.plugin()
	dir := b.TempDir()
	conf := `,"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local"}`
	cycle := func(id string) {
		args := cmd(dir, conf, prevResult100)
		args.ContainerID = id
		w.stdout.Reset()
		w.calls, w.ipamConfs = w.calls[:0], w.ipamConfs[:0]
		if err := p.Add(args); err != nil {
			b.Fatal(err)
		}
		if got := len(filterCalls(w.calls, "IPAMAdd")); got != n {
			b.Fatalf("%d leases taken for %d devices", got, n)
		}
		if err := p.Del(args); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10 { // warm-up, as in BenchmarkAddRecords
		cycle(fmt.Sprintf("warm-%d", i))
	}
	for i := range samples {
		cpu0, start := processCPU(), time.Now()
		cycle(fmt.Sprintf("probe-%d", i))
		v = append(v, float64(time.Since(start))/1e6)
		cpu = append(cpu, float64(processCPU()-cpu0)/1e6)
	}
	return v, cpu
}
