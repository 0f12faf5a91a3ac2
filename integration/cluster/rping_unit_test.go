//go:build cluster

package cluster

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRpingDone(t *testing.T) {
	pings := func(n int) string {
		return strings.Repeat("ping data: rdma-ping-x: ABC\n", n)
	}
	exit := errors.New("exit status 255")
	race := "client DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n"
	for _, tc := range []struct {
		name string
		out  string
		err  error
		want bool
	}{
		{"clean exit, all pings", pings(10), nil, true},
		{"clean exit, pings missing", pings(9), nil, false},
		{"teardown race after all pings", race + pings(10) + "command terminated with exit code 255\n", exit, true},
		{"teardown race before the last ping", race + pings(7) + "command terminated with exit code 255\n", exit, false},
		{"other failure with all pings", "data mismatch\n" + pings(10) + "command terminated with exit code 255\n", exit, false},
		{"race text but another exit code", race + pings(10) + "command terminated with exit code 1\n", exit, false},
		{"kubectl never ran it", pings(10), exit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rpingDone(tc.out, tc.err, 10); got != tc.want {
				t.Fatalf("rpingDone = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRpingListening(t *testing.T) {
	listen := "link rxe0/1 state LISTEN ps TCP pid 812 comm rping cm-idn 0 src-addr fd00:10:1::f:0:c08:7174 \n"
	for _, tc := range []struct {
		name, out, addr string
		want            bool
	}{
		{"listening on the address", listen, "fd00:10:1::f:0:c08", true},
		{"another address's prefix", listen, "fd00:10:1::f:0:c0", false},
		{"connected, not listening", strings.Replace(listen, "LISTEN", "CONNECT", 1), "fd00:10:1::f:0:c08", false},
		{"nothing", "", "fd00:10:1::f:0:c08", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rpingListening(tc.out, tc.addr); got != tc.want {
				t.Errorf("rpingListening = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePluginLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want pluginLine
		ok   bool
	}{
		{`time=2026-11-26T03:40:01.123Z level=INFO msg=done plugin=rdma-chain verb=ADD container=abc pod=default/p ifname=eth0 duration=312.5ms outcome=ok`,
			pluginLine{"done", "default/p", "abc", 312500 * time.Microsecond}, true},
		{`time=2026-11-26T03:40:01.100Z level=INFO msg=attached plugin=rdma-chain container=abc mode=shared links=1`,
			pluginLine{msg: "attached", container: "abc"}, true},
		{`time=2026-11-26T03:40:01.123Z level=INFO msg=done plugin=rdma-chain verb=DEL container=abc pod=default/p duration=3ms outcome=ok`, pluginLine{}, false},
		{`time=2026-11-26T03:40:01.123Z level=ERROR msg=failed verb=ADD container=abc pod=default/p ifname=eth0 duration=1.2s code=11 outcome=error error="x"`, pluginLine{}, false},
		{`level=INFO msg=done verb=ADD pod=default/p duration=bogus outcome=ok`, pluginLine{}, false},
		{`level=INFO msg=attached mode=shared`, pluginLine{}, false},
		{``, pluginLine{}, false},
	} {
		got, ok := parsePluginLine(tc.line)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parsePluginLine(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMeanMeasured(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		mean float64
		n    int
	}{
		{[]float64{23.53, 0}, 23.53, 1},
		{[]float64{10, 20}, 15, 2},
		{[]float64{0, 0}, 0, 0},
		{[]float64{math.Inf(1), 6000}, 6000, 1},
		{[]float64{math.NaN(), math.Inf(1)}, 0, 0},
		{nil, 0, 0},
	} {
		if mean, n := meanMeasured(tc.in); mean != tc.mean || n != tc.n {
			t.Errorf("meanMeasured(%v) = %v, %d; want %v, %d", tc.in, mean, n, tc.mean, tc.n)
		}
	}
}

func TestUnmeasured(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs map[bool][]float64
		done int
		want []bool
	}{
		{"both measured", map[bool][]float64{true: {20, 0}, false: {0, 14}}, 4, nil},
		{"host without a clock", map[bool][]float64{true: {20, 21}, false: {0, 0}}, 4, []bool{false}},
		{"both without", map[bool][]float64{true: {math.Inf(1), 0}, false: {0, 0}}, 4, []bool{true, false}},
		{"one run left", map[bool][]float64{true: {0, 0, 0, 0, 0}, false: {0, 0, 0, 0, 0, 0}}, 11, []bool{true}},
		{"none left", map[bool][]float64{true: {0, 0, 0, 0, 0, 0}, false: {0, 0, 0, 0, 0, 0}}, 12, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unmeasured(tc.runs, tc.done); !slices.Equal(got, tc.want) {
				t.Errorf("unmeasured(%v, %d) = %v, want %v", tc.runs, tc.done, got, tc.want)
			}
		})
	}
}

func TestPerfRow(t *testing.T) {
	bw := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 65536      1000             32.75              31.70  \t\t   0.000507\n" +
		"---------------------------------------------------------------------------------------\n"
	lat := " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 2       1000          871.69         6024.56      3997.42  \t       3870.74     \t513.19 \t\t5100.98 \t\t6024.56\n"
	for _, tc := range []struct {
		name string
		out  string
		want []float64
		ok   bool
	}{
		{"bandwidth", "Send BW Test\n" + bw, []float64{65536, 1000, 32.75, 31.70, 0.000507}, true},
		{"latency", lat, []float64{2, 1000, 871.69, 6024.56, 3997.42, 3870.74, 513.19, 5100.98, 6024.56}, true},
		{"no header", " Couldn't connect to 10.0.0.1:18600\n", nil, false},
		{"header, no row", " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n", nil, false},
		{"header, text row", bw[:strings.Index(bw, "\n")+1] + " Completion with error\n", nil, false},
		{"short bandwidth row", bw[:strings.Index(bw, "\n")+1] + " 65536 1000 32.75\n", nil, false},
		{"latency without a clock", lat[:strings.Index(lat, "\n")+1] + " 2       300          inf            inf          inf      \t       inf         \t-nan   \t\tinf     \t\tinf    \n",
			[]float64{2, 300, math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.NaN(), math.Inf(1), math.Inf(1)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := perfRow(tc.out)
			if ok != tc.ok || (ok && !slices.EqualFunc(got, tc.want, sameFloat)) {
				t.Errorf("perfRow = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestTCPListening(t *testing.T) {
	const head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for _, tc := range []struct {
		name string
		in   string
		port int
		want bool
	}{
		{"ipv4 listener", head + "   0: 00000000:48A9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n", 18601, true},
		{"ipv6 listener", head + "   0: 00000000000000000000000000000000:48A9 00000000000000000000000000000000:0000 0A 0 0 0 0 0\n", 18601, true},
		{"established, not listening", head + "   0: 0100007F:48A9 0100007F:9C40 01 0 0 0 0 0\n", 18601, false},
		{"another port", head + "   0: 00000000:48AA 00000000:0000 0A 0 0 0 0 0\n", 18601, false},
		{"port only as the remote end", head + "   0: 0100007F:9C40 0100007F:48A9 0A 0 0 0 0 0\n", 18601, false},
		{"another port with the same last digits", head + "   0: 00000000:C8A9 00000000:0000 0A 0 0 0 0 0\n", 0x48A9, false},
		{"short line", "   0: 00000000:48A9\n", 18601, false},
		{"nothing", "", 18601, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tcpListening(tc.in, tc.port); got != tc.want {
				t.Errorf("tcpListening(port %d) = %v, want %v", tc.port, got, tc.want)
			}
		})
	}
}

// sameFloat is == but for NaN, which equals NaN here.
func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func TestPerfSeriesRows(t *testing.T) {
	bw := func(avg string) string {
		return " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 8192       200              3.10               " + avg + "                0.000300\n"
	}
	for _, tc := range []struct {
		name, out string
		want      [][]float64
	}{
		{"none", "no RoCE v2 GID holds fd00\n", nil},
		{"two", "=== run 1 on rxe_a\n" + bw("2.50") + "=== run 2 on rxe_a\n" + bw("2.70"),
			[][]float64{{8192, 200, 3.10, 2.50, 0.000300}, {8192, 200, 3.10, 2.70, 0.000300}}},
		{"a run without a row", "=== run 1 on rxe_a\nCouldn't connect to 10.244.2.4:18801\n=== run 2 on rxe_a\n" + bw("0.00"),
			[][]float64{nil, {8192, 200, 3.10, 0, 0.000300}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := perfSeriesRows(tc.out)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if !slices.Equal(got[i], tc.want[i]) {
					t.Errorf("run %d: got %v, want %v", i+1, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestMoreRuns(t *testing.T) {
	for _, tc := range []struct {
		name            string
		withClock, runs int
		want            int
	}{
		{"first", 0, 0, softRoCERuns},
		{"all with a clock", 5, 5, 0},
		{"two without", 3, 5, 2},
		{"none with", 0, 5, 3},
		{"one short after more", 4, 7, 1},
		{"at the most", 2, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := moreRuns(tc.withClock, tc.runs); got != tc.want {
				t.Errorf("moreRuns(%d, %d) = %d, want %d", tc.withClock, tc.runs, got, tc.want)
			}
		})
	}
}
