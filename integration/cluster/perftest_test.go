//go:build cluster

package cluster

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// perfEnd is one end of a perftest run: the kubectl exec target it runs in
// and the address whose RoCE v2 GID of rxe0 it sends from.
type perfEnd struct {
	target []string
	addr   string
}

// perfScript finds the RoCE v2 GID of rxe0 that holds an address (the GID
// table is the device's, the same in every netns of a shared-mode node)
// and runs a perftest program from it, 300 iterations (64 KiB sends for
// ib_send_bw, 2 B for ib_send_lat). Unused GID entries answer EINVAL:
// grep's complaints about them say nothing.
const perfScript = `g=%s; i=
for f in $(grep -l "^$g$" /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null); do
	n=${f##*/}
	if [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n)" = "RoCE v2" ]; then i=$n; break; fi
done
[ -n "$i" ] || { echo "no RoCE v2 GID of rxe0 holds $g"; exit 3; }
exec /bin/busybox timeout 120 /usr/bin/%s -d rxe0 -x "$i" -F -n 300 -p %d %s`

// perf runs prog (ib_send_bw or ib_send_lat) with its server at srv and
// its client at cli and returns the client's result row. oob is the
// server's address for perftest's own TCP exchange of QP numbers and
// GIDs: Debian bookworm's perftest 4.5 makes it over IPv4 only, so it
// runs over the pods' primary network; the test itself is RoCE v2 between
// the ends' IPv6 GIDs.
func (cp *controlPlane) perf(prog string, srv, cli perfEnd, oob string, port int) ([]float64, string, error) {
	cmd := func(e perfEnd, arg string) []string {
		script := fmt.Sprintf(perfScript, expandIPv6(e.addr), prog, port, arg)
		return append(append(append([]string{"exec"}, e.target...), "--", "/bin/busybox", "sh", "-c"), script)
	}
	stop := cp.execBackground(cmd(srv, "")...)
	defer stop()
	// The client is started once the server's out-of-band port listens: a
	// client that finds it closed fails, and one that got through and
	// failed later has ended the server's one run.
	sockets := append(append(append([]string{"exec"}, srv.target...), "--", "/bin/busybox", "sh", "-c"),
		"cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true")
	listening := false
	for deadline := time.Now().Add(time.Minute); !listening && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		out, err := cp.kubectlOut(sockets...)
		listening = err == nil && tcpListening(out, port)
	}
	if !listening {
		return nil, "--- server:\n" + stop(), fmt.Errorf("%s server: no socket listening on port %d within a minute", prog, port)
	}
	out, err := cp.kubectlOut(cmd(cli, oob)...)
	if row, ok := perfRow(out); err == nil && ok {
		return row, out, nil
	}
	if err == nil {
		err = errors.New("no result row in its output")
	}
	return nil, out + "\n--- server:\n" + stop(), fmt.Errorf("%s client: %w", prog, err)
}

// tcpListening reports whether /proc/net/tcp or tcp6 (their lines
// concatenated in procNetTCP) list a socket in state LISTEN (0A) on port,
// the hex number after the local address's colon.
func tcpListening(procNetTCP string, port int) bool {
	hex := fmt.Sprintf("%04X", port)
	for _, line := range strings.Split(procNetTCP, "\n") {
		f := strings.Fields(line)
		if len(f) <= 3 {
			continue
		}
		if i := strings.LastIndexByte(f[1], ':'); i >= 0 && f[1][i+1:] == hex && f[3] == "0A" {
			return true
		}
	}
	return false
}

// perfRow reads perftest's result row: the numbers on the line after its
// "#bytes" header (ib_send_bw: bytes, iterations, peak and average MB/s,
// Mpps; ib_send_lat: bytes, iterations, then t_min, t_max, t_typical,
// t_avg, ... in microseconds).
func perfRow(out string) ([]float64, bool) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") || i+1 >= len(lines) {
			continue
		}
		var row []float64
		for _, f := range strings.Fields(lines[i+1]) {
			if strings.EqualFold(strings.TrimLeft(f, "+-"), "nan") {
				f = "NaN" // C's printf signs a NaN; Go does not read one signed
			}
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil, false
			}
			row = append(row, v)
		}
		return row, len(row) >= 6 || (len(row) == 5 && strings.Contains(l, "BW average"))
	}
	return nil, false
}

// samePerf prints perftest's send bandwidth and latency between the two
// same-node pods (RoCE v2 between their rdma0 addresses' GIDs) beside the
// same tests between node's own address and itself, on the same rxe0 in
// the same run, in the order pods, host, host, pods so that a change in
// the host's load between runs weighs on both, then again for a side with
// no measured run (unmeasured says why). Soft-RoCE loops a packet
// back inside the device when its destination MAC is the port's own,
// which it is both for an ipvlan child of the port's netdev and for the
// node's own address: the two take one data path, so their ratio is what
// the pods' attachment costs RDMA.
func samePerf(t *testing.T, cp *controlPlane, node, srvAddr, cliAddr string) {
	t.Helper()
	podIP, err := cp.kubectlOut("get", "pod", "rping-server", "-o", "jsonpath={.status.podIP}")
	if err != nil || podIP == "" {
		t.Fatalf("rping-server's pod IP: %v: %q", err, podIP)
	}
	shell := []string{"-n", "kube-system", cp.shellPod(t, node)}
	nodeAddr := nodeRDMAAddr(node)
	port := 18600
	for _, test := range []struct {
		prog, unit string
		col        int // the result row's column: average MB/s, average us
	}{
		{"ib_send_bw", "MB/s", 3},
		{"ib_send_lat", "us", 5},
	} {
		runs := map[bool][]float64{} // by whether the pods ran it
		order := []bool{true, false, false, true}
		for i := 0; i < len(order); i++ {
			onPods := order[i]
			srv, cli, oob, what := perfEnd{[]string{"rping-server"}, srvAddr}, perfEnd{[]string{"rping-client"}, cliAddr}, podIP, "pod-to-pod"
			if !onPods {
				srv, cli, oob, what = perfEnd{shell, nodeAddr}, perfEnd{shell, nodeAddr}, "127.0.0.1", "host-to-host"
			}
			port++
			row, out, err := cp.perf(test.prog, srv, cli, oob, port)
			if err != nil {
				t.Fatalf("%s %s on %s [%s] -> [%s]: %v: %s", test.prog, what, node, cli.addr, srv.addr, err, out)
			}
			runs[onPods] = append(runs[onPods], row[test.col])
			if i == len(order)-1 {
				order = append(order, unmeasured(runs, len(order))...)
			}
		}
		pods, host := runs[true], runs[false]
		p, np := meanMeasured(pods)
		h, nh := meanMeasured(host)
		if np == 0 || nh == 0 {
			side := "pod-to-pod"
			if np > 0 {
				side = "host-to-host"
			}
			t.Errorf("perftest %s on %s: %s had no run with a clock in %d runs of both sides (0 or inf: perftest's clock sampling failed; pod-to-pod %s, host-to-host %s)",
				test.prog, node, side, len(order), floats(pods), floats(host))
			continue
		}
		t.Logf("CLUSTER-FIGURE perftest %s on %s's rxe0: pod-to-pod %.2f %s (%s), host-to-host %.2f %s (%s): %.2fx (runs without a clock left out)",
			test.prog, node, p, test.unit, floats(pods), h, test.unit, floats(host), p/h)
	}
}

// perfMaxRuns bounds samePerf's runs of one program, both sides: a side
// whose every run lacks a clock fails samePerf.
const perfMaxRuns = 12

// unmeasured is the sides (true: the pods) that get one more run after
// done runs, which are those without a measured one while fewer than
// perfMaxRuns ran. perftest converts the CPU cycles it counts with the
// clock rate it samples as it prints its report (rdtsc against
// gettimeofday, 200 samples); in a TCG guest on a loaded host that
// sampling can fail ("Correlation coefficient r^2 < 0.9", perftest's
// get_clock.c): a sample whose rdtsc and gettimeofday the host's
// scheduler or the other vCPU (single-threaded TCG runs the two in turn)
// splits is an outlier. The run, which completed, prints 0.00 MB/s or
// inf us: no measurement.
func unmeasured(runs map[bool][]float64, done int) []bool {
	var more []bool
	for _, onPods := range []bool{true, false} {
		if _, n := meanMeasured(runs[onPods]); n == 0 && done+len(more) < perfMaxRuns {
			more = append(more, onPods)
		}
	}
	return more
}

// hasClock reports whether a perftest figure is a measurement: a run
// whose clock sampling failed prints 0.00 or inf (unmeasured).
func hasClock(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// meanMeasured is the mean of v's measurements (positive, finite) and how
// many there are.
func meanMeasured(v []float64) (float64, int) {
	s, n := 0.0, 0
	for _, x := range v {
		if hasClock(x) {
			s, n = s+x, n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	return s / float64(n), n
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}
