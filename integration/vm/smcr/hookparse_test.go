package smcr

import (
	"slices"
	"testing"
	"time"
)

// TestHookFigureParsers runs the figures' parsers on the host, over the
// plugin's log line and go test's benchmark lines as the guest prints
// them.
func TestHookFigureParsers(t *testing.T) {
	done := "time=2026-11-27T11:33:06.888Z level=INFO msg=done plugin=rdma-chain verb=ADD container=c pod=default/pod1 ifname=eth0 duration=2.174278s outcome=ok"
	for _, c := range []struct {
		log  string
		want time.Duration
	}{
		{done, 2174278 * time.Microsecond},
		{"level=INFO msg=attached\nlevel=INFO msg=done verb=ADD duration=869.793ms outcome=ok", 869793 * time.Microsecond},
		{"msg=done verb=ADD duration=950.1µs", 950100 * time.Nanosecond},
		{"msg=done verb=ADD duration=1m2.5s", 62500 * time.Millisecond},
	} {
		if got, err := addDuration([]byte(c.log)); err != nil || got != c.want {
			t.Errorf("addDuration(%q) = %v, %v; want %v", c.log, got, err, c.want)
		}
	}
	for _, log := range []string{"", "msg=done verb=DEL duration=1ms", "msg=failed verb=ADD duration=1ms", "msg=done verb=ADD duration=soon"} {
		if got, err := addDuration([]byte(log)); err == nil {
			t.Errorf("addDuration(%q) = %v, want an error", log, got)
		}
	}
	out := `BenchmarkSocketClose/detached-2         	   20000	    105024 ns/op
BenchmarkSocketClose/detached-2         	   20000	     52000 ns/op
BenchmarkSocketClose/attached-2         	   20000	     52512 ns/op	      1193 prog-ns/call
BenchmarkSocketClose/attached-2         	   20000	     78000 ns/op	       580.4 prog-ns/call
PASS`
	d, a, p := benchRuns(out)
	if !slices.Equal(d, []float64{105024, 52000}) || !slices.Equal(a, []float64{52512, 78000}) || !slices.Equal(p, []float64{1193, 580.4}) {
		t.Errorf("benchRuns = %v %v %v", d, a, p)
	}
	if r := pairRatios(a, d); len(r) != 2 || r[0] != 0.5 || r[1] != 1.5 || median(r) != 0.5 {
		t.Errorf("pairRatios = %v", r)
	}
	if got := created("client", "listener created proto=256\nclient created proto=6\nclient proto=6\n"); got != 6 {
		t.Errorf("created(client) = %d, want 6", got)
	}
	if got := created("probe", "tcpproto: refused\n"); got != -1 {
		t.Errorf("created(probe) without a line = %d, want -1", got)
	}
}
