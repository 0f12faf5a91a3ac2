package smcr

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// hookKernelTests runs the hook's own kernel tests (pkg/smc/hook, -tags
// smchook), a binary of their own as on a node the loader is: each must
// pass, the two that switch and hold sockets among them, and none skip.
func hookKernelTests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, hookTestBin, "-test.v", "-test.count=1").CombinedOutput()
	// one Logf: its first line becomes an RC-INFO line, the output stays in the log
	t.Logf("%s -test.v -test.count=1: exit %v\n%s", hookTestBin, err, out)
	guestkit.Check(t, "hook-kernel-tests", func() error {
		if err != nil {
			return fmt.Errorf("%s: %w (its output is in the log above)", hookTestBin, err)
		}
		for _, name := range []string{"TestHookSwitchesListedNetns", "TestHookHeldBetweenPods"} {
			if !strings.Contains(string(out), "--- PASS: "+name+" ") {
				return fmt.Errorf("%s did not report --- PASS: %s", hookTestBin, name)
			}
		}
		if strings.Contains(string(out), "--- SKIP") {
			return fmt.Errorf("%s skipped a test: a skip is no pass here", hookTestBin)
		}
		return nil
	})
}

// socketCost is what every socket() on the node pays: socket()+close() in
// an unlisted netns with the program detached and attached, in one run of
// BenchmarkSocketClose, 7 counts of each; the median of the 7 paired
// ratios, and the program's own run time (the kernel's bpf_stats).
func socketCost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, hookTestBin, "-test.run", "^$", "-test.bench", "SocketClose",
		"-test.benchtime", "20000x", "-test.count", "7").CombinedOutput()
	t.Logf("%s -test.bench SocketClose: exit %v\n%s", hookTestBin, err, out)
	detached, attached, prog := benchRuns(string(out))
	ratio, cost := "not measured", "not measured"
	if r := pairRatios(attached, detached); len(r) > 0 {
		ratio = fmt.Sprintf("%.3f (median of %d paired runs; ratios %.3f..%.3f)", median(r), len(r), r[0], r[len(r)-1])
	}
	if len(prog) > 0 && len(detached) > 0 {
		p, d := mean(prog), mean(detached)
		cost = fmt.Sprintf("%.0f ns per call (kernel bpf_stats) against %.0f ns of socket()+close(): %.3f", p, d, 1+p/d)
	}
	t.Logf("socket()+close() with the hook attached / detached: %s", ratio)
	t.Logf("the program's own cost: %s", cost)
}

// benchRuns reads BenchmarkSocketClose's result lines: each count's ns/op
// detached and attached, and the attached runs' prog-ns/call.
func benchRuns(out string) (detached, attached, prog []float64) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkSocketClose/") {
			continue
		}
		values := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				values[f[i+1]] = v
			}
		}
		ns, ok := values["ns/op"]
		switch {
		case !ok:
		case strings.HasPrefix(f[0], "BenchmarkSocketClose/detached"):
			detached = append(detached, ns)
		case strings.HasPrefix(f[0], "BenchmarkSocketClose/attached"):
			attached = append(attached, ns)
			if p, ok := values["prog-ns/call"]; ok {
				prog = append(prog, p)
			}
		}
	}
	return detached, attached, prog
}

// pairRatios is a[i]/b[i] for each pair where both are positive, sorted.
func pairRatios(a, b []float64) []float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			r = append(r, a[i]/b[i])
		}
	}
	slices.Sort(r)
	return r
}

// median of sorted values; the lower middle of an even count.
func median(sorted []float64) float64 { return sorted[(len(sorted)-1)/2] }

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// hookRunFigure is what one exec of the hook binary costs here: the mean
// wall time of 5 runs of each of two verbs (supported parses the kernel's
// BTF; listed opens the pins).
func hookRunFigure(t *testing.T) {
	t.Logf("one run of rdma-chain-smc-hook: supported %s ms, listed %s ms",
		meanRun(5, hookAway, hookcmd.VerbSupported, pinDir), meanRun(5, hookAway, hookcmd.VerbListed, pinDir, "1"))
}

// meanRun is the mean wall time in ms of n runs of name with args, or why
// it was not measured.
func meanRun(n int, name string, args ...string) string {
	var total time.Duration
	for range n {
		start := time.Now()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("not measured (%s %s: %v: %s)", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		total += time.Since(start)
	}
	return fmt.Sprintf("%.0f", ms(total)/float64(n))
}

// addDuration is the plugin's own ADD duration in its log: the "done"
// line of log/slog's text form (msg=done ... verb=ADD ... duration=D).
func addDuration(log []byte) (time.Duration, error) {
	for _, line := range strings.Split(string(log), "\n") {
		f := strings.Fields(line)
		if !slices.Contains(f, "msg=done") || !slices.Contains(f, "verb=ADD") {
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "duration="); ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					return 0, fmt.Errorf("the plugin's ADD duration %q: %w", v, err)
				}
				return d, nil
			}
		}
	}
	return 0, errors.New("no msg=done verb=ADD line with a duration in the plugin's log")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// addPairs measures, in pairs, the plugin's own duration of an SMC-R
// pod's ADD with the program pinned (the hook binary away) against a
// plain shared pod's: under TCG on a shared host the median of 9 pairs
// varies far less than single ADDs. Each pair is deleted before the next.
func (s *hookScenario) addPairs(t *testing.T) {
	var smcr, plain, ratios []float64
	for i := 1; i <= 9; i++ {
		ps, pp := hookPod(fmt.Sprintf("smc%d", i), true), hookPod(fmt.Sprintf("plain%d", i), false)
		ds, oks := s.timedAdd(t, ps)
		dp, okp := s.timedAdd(t, pp)
		if oks && okp && ds > 0 && dp > 0 {
			smcr, plain = append(smcr, ms(ds)), append(plain, ms(dp))
			ratios = append(ratios, ms(ds)/ms(dp))
		}
		for _, p := range []guestkit.Pod{ps, pp} {
			guestkit.ExpectOK(t, "del-"+p.Name, s.Del(t, p))
			guestkit.DelNetNS(t, p)
		}
	}
	fig := "not measured"
	if n := len(ratios); n > 0 {
		slices.Sort(ratios)
		slices.Sort(smcr)
		slices.Sort(plain)
		fig = fmt.Sprintf("%.2f (median of %d pairs, ratios %.2f..%.2f; SMC-R %.0f ms, plain %.0f ms, medians)",
			median(ratios), n, ratios[0], ratios[n-1], median(smcr), median(plain))
	}
	t.Logf("ADD of an SMC-R pod (program pinned) / a plain shared pod: %s", fig)
	t.Logf("ADD of the SMC-R pod that loaded the program: %s", s.loadADD)
}

// timedAdd is the check add-POD and the plugin's ADD duration.
func (s *hookScenario) timedAdd(t *testing.T, p guestkit.Pod) (time.Duration, bool) {
	err := s.Add(t, p)
	var d time.Duration
	ok := guestkit.Check(t, "add-"+p.Name, func() error {
		if err != nil {
			return err
		}
		var derr error
		d, derr = addDuration(s.C.Stderr)
		return derr
	})
	return d, ok
}
