//go:build cluster

package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// softRoCEPerfTests are the perftest programs run pod to pod and host to
// host, with their arguments and the result row's column that is their
// figure. Sizes are small: soft-RoCE between TCG guests moves about a
// MB/s (docs/performance.md), and each side runs every program until five
// runs have a clock (measured).
var softRoCEPerfTests = []struct {
	prog, args, unit string
	col              int // average MB/s, or t_avg in us
}{
	{"ib_send_bw", "-s 4096 -n 100", "MB/s", 3},
	{"ib_send_lat", "-n 100", "us", 5},
	{"ib_write_bw", "-s 4096 -n 100", "MB/s", 3},
}

// softRoCERuns is how many runs with a clock of each program each side
// wants, and softRoCEMaxRuns how many runs it may make for them: perftest
// converts the CPU cycles it counts with a clock rate it samples as it
// prints its report (unmeasured), and in a TCG guest on a busy host that sampling fails
// ("Correlation coefficient r^2 < 0.9", perftest's get_clock.c), so a run
// that completed prints 0.00 MB/s or inf us: no measurement (seen for 8 of
// 10 host-to-host runs beside another control plane).
const (
	softRoCERuns    = 5
	softRoCEMaxRuns = 8
)

// perfSide is one end of a perftest series: the kubectl exec target it
// runs in, whether in the node's root (chroot /host: a container's /dev
// is made at its start and lacks an RDMA device made later), the address
// whose RoCE v2 GID it sends from, and, for the server, the IPv4 address
// of perftest's own TCP exchange (Debian bookworm's perftest makes it
// over IPv4 only).
type perfSide struct {
	target    []string
	host      bool
	addr, oob string
}

// perfSeriesScript runs a perftest program @RUNS@ times from the RDMA
// device holding @GID@ as RoCE v2, a server per run on @PORT@+k; the
// client (@OOB@ set) tries each run again while the run's server is not
// listening yet, for as long as a server's run may last (the one before
// may still run), and prints each run's output after "=== run k". Unused GID entries answer
// EINVAL: grep's complaints about them say nothing.
const perfSeriesScript = `g=@GID@; d=; i=
for f in $(grep -l "^$g$" /sys/class/infiniband/*/ports/1/gids/* 2>/dev/null); do
	p=${f%/gids/*}; n=${f##*/}
	[ "$(cat "$p/gid_attrs/types/$n")" = "RoCE v2" ] || continue
	d=${p#/sys/class/infiniband/}; d=${d%%/*}; i=$n; break
done
[ -n "$i" ] || { echo "no RoCE v2 GID holds $g"; exit 3; }
k=0
while [ $k -lt @RUNS@ ]; do
	k=$((k + 1)); try=0
	while :; do
		out=$(/bin/busybox timeout 120 /usr/bin/@PROG@ -d $d -x $i -F @ARGS@ -p $((@PORT@ + k)) @OOB@ 2>&1) && break
		try=$((try + 1))
		case "$out" in *"Couldn't connect"*) [ -n "@OOB@" ] && [ $try -lt 260 ] && { sleep 0.5; continue; } ;; esac
		break
	done
	echo "=== run $k on $d"
	echo "$out"
done`

// perfSeries runs prog with args n times between srv and cli, one
// kubectl exec on each side, and returns each run's row (nil: the run
// printed none) and the client's output.
func (cp *controlPlane) perfSeries(prog, args string, srv, cli perfSide, n, port int) ([][]float64, string) {
	script := func(s perfSide, oob string) []string {
		sh := strings.NewReplacer("@GID@", expandIPv6(s.addr), "@RUNS@", strconv.Itoa(n), "@PROG@", prog, "@ARGS@", args,
			"@PORT@", strconv.Itoa(port), "@OOB@", oob).Replace(perfSeriesScript)
		cmd := append(append([]string{"exec"}, s.target...), "--")
		if s.host {
			cmd = append(cmd, "/bin/busybox", "chroot", "/host")
		}
		return append(cmd, "/bin/busybox", "sh", "-c", sh)
	}
	stop := cp.execBackground(script(srv, "")...)
	defer stop()
	out, err := cp.kubectlOut(script(cli, srv.oob)...)
	if err != nil {
		out += fmt.Sprintf("\n(client: %v)\n--- server:\n%s", err, stop())
	}
	return perfSeriesRows(out), out
}

// perfSeriesRows reads the result row of each run of perfSeriesScript's
// client output, nil for a run that printed none.
func perfSeriesRows(out string) [][]float64 {
	var rows [][]float64
	for _, run := range strings.Split(out, "=== run ")[1:] {
		row, ok := perfRow(run)
		if !ok {
			row = nil
		}
		rows = append(rows, row)
	}
	return rows
}

// measured runs prog until softRoCERuns runs have a clock or
// softRoCEMaxRuns have run (moreRuns), and returns the figures of those
// with one and how many ran; t fails when a run printed no result or none
// has a clock.
func (cp *controlPlane) measured(t *testing.T, what, prog, args string, col int, srv, cli perfSide, port *int) ([]float64, int) {
	t.Helper()
	var got []float64
	runs := 0
	for n := moreRuns(0, 0); n > 0; n = moreRuns(len(got), runs) {
		rows, out := cp.perfSeries(prog, args, srv, cli, n, *port)
		*port += n
		runs += n
		if len(rows) != n || countNil(rows) > 0 {
			t.Fatalf("%s %s: %d of %d runs printed a result; the client:\n%s", prog, what, len(rows)-countNil(rows), n, out)
		}
		for _, r := range rows {
			if len(r) > col && hasClock(r[col]) {
				got = append(got, r[col])
			}
		}
	}
	if len(got) == 0 {
		t.Fatalf("%s %s: none of %d runs had a clock (perftest printed 0.00 or inf)", prog, what, runs)
	}
	return got, runs
}

// moreRuns is how many runs measured makes next, after runs of which
// withClock had a clock: softRoCERuns at first, then what is missing of
// softRoCERuns with a clock, within softRoCEMaxRuns in all.
func moreRuns(withClock, runs int) int {
	if runs == 0 {
		return softRoCERuns
	}
	return max(0, min(softRoCERuns-withClock, softRoCEMaxRuns-runs))
}

func countNil(rows [][]float64) int {
	n := 0
	for _, r := range rows {
		if r == nil {
			n++
		}
	}
	return n
}

// perfFigures are a side's figures of one program, from the runs with a
// clock, and how many runs it made.
type perfFigures struct {
	values []float64
	runs   int
}

// hostSoftRoCERxe is the rxe device made on each node's soft0 for the
// host-to-host figures, deleted before any pod starts: an RDMA device on
// the pods' NIC would hold GIDs for their children's addresses and take
// their traffic (docs/configuration.md, "Soft-RoCE per pod").
const hostSoftRoCERxe = "rxesr"

// hostSoftRoCEPerf measures each perftest program host to host between
// the nodes' soft0 addresses (node-a the client, node-b the server), on an
// rxe device made on each host's soft0 for it, and deletes the devices.
// It returns the runs by program.
func hostSoftRoCEPerf(t *testing.T, cp *controlPlane) map[string]perfFigures {
	t.Helper()
	for i, node := range nodeNames {
		cp.nodeShell(t, node, fmt.Sprintf(`/usr/sbin/rdma link add %s type rxe netdev %s
i=0
until grep -qx %s /sys/class/infiniband/%s/ports/1/gids/* 2>/dev/null; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done`,
			hostSoftRoCERxe, softRoCENIC, expandIPv6(fmt.Sprintf("fd00:60:%d::1", i+1)), hostSoftRoCERxe))
	}
	srv := perfSide{[]string{"-n", "kube-system", cp.shellPod(t, nodeNames[1])}, true, "fd00:60:2::1", "192.168.50.12"}
	cli := perfSide{[]string{"-n", "kube-system", cp.shellPod(t, nodeNames[0])}, true, "fd00:60:1::1", ""}
	runs := map[string]perfFigures{}
	port := 18700
	for _, test := range softRoCEPerfTests {
		var f perfFigures
		f.values, f.runs = cp.measured(t, "host-to-host", test.prog, test.args, test.col, srv, cli, &port)
		runs[test.prog] = f
	}
	for _, node := range nodeNames {
		cp.nodeShell(t, node, fmt.Sprintf(`/usr/sbin/rdma link delete %s
! ls /sys/class/infiniband | grep -qx %s`, hostSoftRoCERxe, hostSoftRoCERxe))
	}
	return runs
}

// podsPerf measures each perftest program between the two pods' own
// devices (cli on node-a, srv on node-b, as the host's), prints each
// program's medians beside the host's with their ratio, and checks that
// only the pods' own devices carried it.
func podsPerf(t *testing.T, cp *controlPlane, a, b softRoCEEnd, host map[string]perfFigures) {
	t.Helper()
	if a.node != nodeNames[0] {
		a, b = b, a
	}
	srv := perfSide{[]string{b.pod}, false, b.addr, b.podIP}
	cli := perfSide{[]string{a.pod}, false, a.addr, ""}
	before := cp.rdmaCounters(t, a, b)
	port := 18800
	for _, test := range softRoCEPerfTests {
		pods, n := cp.measured(t, "pod-to-pod", test.prog, test.args, test.col, srv, cli, &port)
		hf := host[test.prog]
		p, h := median(pods), median(hf.values)
		t.Logf("CLUSTER-FIGURE perftest %s across nodes on soft-RoCE: pod-to-pod %.2f %s (%s; %d of %d runs with a clock), host-to-host %.2f %s (%s; %d of %d runs): %.2fx (medians of the runs with a clock)",
			test.prog, p, test.unit, floats(pods), len(pods), n, h, test.unit, floats(hf.values), len(hf.values), hf.runs, p/h)
	}
	cp.assertOwnDevicesCarried(t, before, cp.rdmaCounters(t, a, b), a, b)
}

// rdmaCounters reads port 1's sent and received packets of every RDMA
// device with hw_counters on the ends' nodes, keyed "node/device".
func (cp *controlPlane) rdmaCounters(t *testing.T, ends ...softRoCEEnd) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	var nodes []string
	for _, e := range ends {
		if !slices.Contains(nodes, e.node) {
			nodes = append(nodes, e.node)
		}
	}
	for _, node := range nodes {
		s := cp.nodeShell(t, node, `for d in /sys/class/infiniband/*; do
	c=$d/ports/1/hw_counters
	[ -r $c/sent_pkts ] && echo "${d##*/} $(cat $c/sent_pkts) $(cat $c/rcvd_pkts)"
done; true`)
		for _, l := range strings.Split(s, "\n") {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			sent, err1 := strconv.Atoi(f[1])
			rcvd, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil {
				out[node+"/"+f[0]] = [2]int{sent, rcvd}
			}
		}
	}
	return out
}

// assertOwnDevicesCarried checks that each end's own device sent and
// received packets between before and after, and that no other RDMA
// device of their nodes did.
func (cp *controlPlane) assertOwnDevicesCarried(t *testing.T, before, after map[string][2]int, ends ...softRoCEEnd) {
	t.Helper()
	own := map[string]bool{}
	for _, e := range ends {
		k := e.node + "/" + e.device
		own[k] = true
		b, a := before[k], after[k]
		if _, ok := after[k]; !ok || a[0] <= b[0] || a[1] <= b[1] {
			t.Errorf("%s's own device %s: sent %d -> %d, received %d -> %d: want both to move", e.pod, k, b[0], a[0], b[1], a[1])
		}
	}
	var moved []string
	for k, a := range after {
		if b, ok := before[k]; !own[k] && ok && a != b {
			moved = append(moved, fmt.Sprintf("%s sent +%d received +%d", k, a[0]-b[0], a[1]-b[1]))
		}
	}
	if len(moved) > 0 {
		t.Errorf("RDMA devices other than the pods' own moved: %s", strings.Join(moved, "; "))
	}
}

// allPairs runs ib_write_bw once between every two of the pods (each
// pair's first end the client): each must end with a result row.
func allPairs(t *testing.T, cp *controlPlane, ends []softRoCEEnd) {
	t.Helper()
	port, start, n := 18900, time.Now(), 0
	var figures []string
	for i := range ends {
		for j := i + 1; j < len(ends); j++ {
			srv := perfSide{[]string{ends[j].pod}, false, ends[j].addr, ends[j].podIP}
			cli := perfSide{[]string{ends[i].pod}, false, ends[i].addr, ""}
			rows, out := cp.perfSeries("ib_write_bw", softRoCEPerfTests[2].args, srv, cli, 1, port)
			port++
			n++
			if len(rows) != 1 || rows[0] == nil {
				t.Errorf("ib_write_bw %s (%s) -> %s (%s): no result: %s", ends[i].pod, ends[i].node, ends[j].pod, ends[j].node, out)
				continue
			}
			figures = append(figures, fmt.Sprintf("%s->%s %.2f", ends[i].pod, ends[j].pod, rows[0][3]))
		}
	}
	t.Logf("CLUSTER-FIGURE ib_write_bw all pairs of %d soft-RoCE pods on %d nodes, %d pairs in %.0f s (MB/s): %s",
		len(ends), len(nodeNames), n, time.Since(start).Seconds(), strings.Join(figures, ", "))
}

// assertSoftRoCEClaim checks that pod's claim got node's soft-RoCE
// device from the driver and that its status carries the pod's rdma0.
func (cp *controlPlane) assertSoftRoCEClaim(t *testing.T, pod, node string) {
	t.Helper()
	claim, err := cp.kubectlOut("get", "pod", pod, "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
	if err != nil || claim == "" {
		t.Fatalf("%s has no claim: %v: %s", pod, err, claim)
	}
	alloc, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		`jsonpath={range .status.allocation.devices.results[*]}{.driver} {.pool} {.device}{end}`)
	if want := "rdma-chain.github.io " + node + " softroce-" + softRoCENIC; alloc != want {
		t.Errorf("claim %s of %s allocated %q, want %q", claim, pod, alloc, want)
	}
	status := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "rdma0") },
		"get", "resourceclaim", claim, "-o", claimStatus)
	t.Logf("%s on %s: claim %s allocated %s; status.devices: %s", pod, node, claim, alloc, status)
}

// softRoCELeftNothing checks that node holds no pod's rxe device, no soft0
// child in the host netns but the router's (a child moved back there),
// no attachment record, lease of the RDMA network or GID of soft0's /64s,
// since (printed) the deletes began.
func (cp *controlPlane) softRoCELeftNothing(t *testing.T, node string, since time.Time) {
	t.Helper()
	var left string
	cp.pollFunc(t, 3*time.Minute, func() (bool, string) {
		left = cp.nodeShell(t, node, `echo "rxe $(/usr/sbin/rdma link show | grep -c 'link rxe_')"
echo "children $(/usr/sbin/ip -o link show | grep -c '@soft0:')"
echo "records $(ls /host/var/lib/cni/rdma-chain/attachments 2>/dev/null | grep -vc '^\.')"
echo "leases $(find /host/var/lib/cni/networks-rdma -type f -name '*:*' | wc -l)"
echo "gids $(cat /sys/class/infiniband/*/ports/1/gids/* 2>/dev/null | grep -c '^fd00:0060:')"`)
		for _, want := range []string{"rxe 0", "children 1", "records 0", "leases 0", "gids 0"} {
			if !slices.Contains(strings.Split(left, "\n"), want) {
				return false, fmt.Sprintf("%s after the pods' delete: want %q:\n%s", node, want, left)
			}
		}
		return true, ""
	})
	t.Logf("%s %.1f s after the deletes began: %s (children: the router's sr0)", node, time.Since(since).Seconds(), strings.ReplaceAll(left, "\n", "; "))
}
