package netns

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// The benchmarks of this tier measure whole processes against the upstream
// plugins `make deps` installs, paired and interleaved in one run. Each one
// adds rows to the table scripts/bench.sh prints: to the file named by
// RC_BENCH_OUT when set, else to the benchmark's log. Run them with
// -test.benchtime=1x: every benchmark takes its own fixed number of samples.

// benchSamples is the number of paired samples per process-level measure;
// RC_BENCH_SAMPLES overrides it.
func benchSamples(def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("RC_BENCH_SAMPLES"), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// sample is one process run (or one sequence of runs).
type sample struct {
	wall, cpu time.Duration // cpu: user+system of the children waited for
	maxRSSKB  int64
}

// runProc runs cmd, with the calling goroutine's netns, and measures it.
func runProc(cmd *exec.Cmd) (sample, error) {
	var stderr bytes.Buffer
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	start := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(start)}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			s.maxRSSKB = ru.Maxrss
		}
	}
	if err != nil {
		return s, fmt.Errorf("%s: %w: %s", cmd.Path, err, stderr.String())
	}
	return s, nil
}

// childrenCPU is the CPU time of every child waited for so far.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// paired runs a and b n times each, alternating which goes first.
func paired(b *testing.B, n int, a, base func() (sample, error)) (as, bs []sample) {
	b.Helper()
	for i := range n {
		order := []func() (sample, error){a, base}
		if i%2 == 1 {
			order = []func() (sample, error){base, a}
		}
		var got [2]sample
		for j, f := range order {
			s, err := f()
			if err != nil {
				b.Fatal(err)
			}
			got[j] = s
		}
		if i%2 == 1 {
			got[0], got[1] = got[1], got[0]
		}
		as, bs = append(as, got[0]), append(bs, got[1])
	}
	return as, bs
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func ms(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func cpuMS(s sample) float64  { return float64(s.cpu) / 1e6 }
func wallMS(s sample) float64 { return float64(s.wall) / 1e6 }
func rssMB(s sample) float64  { return float64(s.maxRSSKB) / 1024 }

// row is one line of the table. A ratio target compares the median with the
// baseline's; an absolute one compares the median with maxAbs.
type row struct {
	measure, unit  string
	v              []float64
	baseName       string
	base           []float64
	maxRatio       float64 // 0: no ratio target
	maxAbs         float64 // 0: no absolute target
	failed         *int    // set: the target is no failed sample
	target, remark string
}

var benchOut sync.Mutex

// report prints r as a markdown table row and reports its median.
func report(b *testing.B, r row) {
	b.Helper()
	med, p95 := quantile(r.v, 0.5), quantile(r.v, 0.95)
	base, ratio, met := "", "", "-"
	if len(r.base) > 0 {
		bm := quantile(r.base, 0.5)
		base = fmt.Sprintf("%s %.3g %s", r.baseName, bm, r.unit)
		if bm > 0 {
			ratio = fmt.Sprintf("%.2fx", med/bm)
			if r.maxRatio > 0 {
				met = verdict(med/bm <= r.maxRatio)
			}
		}
	}
	if r.maxAbs > 0 {
		met = verdict(med <= r.maxAbs)
	}
	if r.failed != nil {
		met = verdict(*r.failed == 0)
	}
	line := fmt.Sprintf("| %s | %.3g %s | %.3g %s | %s | %s | %s | %s | %s |\n",
		r.measure, med, r.unit, p95, r.unit, base, ratio, r.target, met, r.remark)
	b.ReportMetric(med, "median-"+r.unit)
	benchOut.Lock()
	defer benchOut.Unlock()
	testenv.BenchRow(b, line)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// pluginBin is the built rdma-chain (RDMA_CHAIN_BIN, else bin/rdma-chain).
func pluginBin(b *testing.B) string {
	b.Helper()
	p := os.Getenv("RDMA_CHAIN_BIN")
	if p == "" {
		p = filepath.Join(testenv.RepoRoot(), "bin", "rdma-chain")
	}
	return testenv.RequireBinary(b, filepath.Base(p), filepath.Dir(p))
}

// upstream is one reference plugin from .tools/cni/bin.
func upstream(b *testing.B, name string) string {
	b.Helper()
	return testenv.RequireBinary(b, name, testenv.ToolsDir("cni", "bin"))
}

// cniCmd is bin run for a CNI verb with conf on stdin.
func cniCmd(bin, verb string, conf []byte, env ...string) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"CNI_COMMAND=" + verb, "CNI_PATH=" + filepath.Dir(bin)}, env...)
	cmd.Stdin = bytes.NewReader(conf)
	return cmd
}
