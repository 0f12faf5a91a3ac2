//go:build containerd

package containerd

import (
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	idleWindow = 6 * time.Second // longer than kubelet's 5 s runtime-status period
	statusPoll = 10              // CRI Status calls, as kubelet makes them
)

// statusLines are the closing lines of the plugin's STATUS calls so far.
func statusLines(t *testing.T, e *env) []logLine {
	var out []logLine
	for _, l := range find(e.cni.logLines(t), "verb", "STATUS") {
		if l["msg"] == "done" || l["msg"] == "failed" { // each call's closing line
			out = append(out, l)
		}
	}
	return out
}

// testStatus (containerd 2.x, 1.1.0 conflist) records what containerd sends
// on its own (STATUS without any CRI call) and per CRI Status call, and
// asserts the plugin's answers are fast and truthful: kubelet's socket up,
// the node's network is ready; down with podSelection "requested", STATUS
// fails with code 50 and containerd reports NetworkReady=false with the
// plugin's message through CRI Status.
func testStatus(t *testing.T, e *env) {
	n0 := len(statusLines(t, e))
	time.Sleep(idleWindow)
	idle := len(statusLines(t, e)) - n0
	t.Logf("status: %s sent %d STATUS in %s with no CRI Status call (it has no timer of its own when 0)", e.rt.name, idle, idleWindow)

	var rtts []time.Duration
	for i := 0; i < statusPoll; i++ {
		before := len(statusLines(t, e))
		start := time.Now()
		resp, err := e.cri.runtimeStatus(callCtx(t), false)
		rtts = append(rtts, time.Since(start))
		if err != nil {
			t.Fatalf("CRI Status: %v", err)
		}
		if c := networkCondition(resp); c == nil || !c.Status {
			t.Errorf("CRI Status with the kubelet up: NetworkReady %v, want true", c)
		}
		sent := find(statusLines(t, e)[before:], "outcome", "ok")
		if len(sent) != 1 {
			t.Errorf("CRI Status call %d: plugin logged %d successful STATUS, want 1", i, len(sent))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := pluginDurations(t, statusLines(t, e)[n0+idle:])
	t.Logf("status: %d CRI Status calls -> %d STATUS; CRI Status round trip median %s max %s; plugin STATUS median %s max %s",
		statusPoll, len(took), median(rtts), maxOf(rtts), median(took), maxOf(took))
	if m := maxOf(took); m > time.Second {
		t.Errorf("plugin STATUS took up to %s, want well under kubelet's 5 s period", m)
	}

	e.stopKubelet(t)
	defer func() {
		if e.kubelet == nil {
			e.startKubelet(t)
		}
	}()
	before := len(statusLines(t, e))
	start := time.Now()
	resp, err := e.cri.runtimeStatus(callCtx(t), false)
	if err != nil {
		t.Fatalf("CRI Status: %v", err)
	}
	c := networkCondition(resp)
	t.Logf("status: kubelet down: CRI Status answered in %s: NetworkReady=%v reason %q message %q",
		time.Since(start).Round(time.Millisecond), c.GetStatus(), c.GetReason(), c.GetMessage())
	if c == nil || c.Status || !strings.Contains(c.Message, "kubelet pod-resources API at "+e.cni.socket+" is not reachable") {
		t.Errorf("CRI Status with the kubelet down: NetworkReady %v, want false with the plugin's message naming %s", c, e.cni.socket)
	}
	expectLine(t, statusLines(t, e)[before:], "outcome", "error", "code", "50")

	e.startKubelet(t)
	resp, err = e.cri.runtimeStatus(callCtx(t), false)
	if c := networkCondition(resp); err != nil || c == nil || !c.Status {
		t.Errorf("CRI Status with the kubelet back: %v %v, want NetworkReady true", c, err)
	}
}

// pluginDurations parses the duration= of log lines.
func pluginDurations(t *testing.T, lines []logLine) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, l := range lines {
		d, err := time.ParseDuration(l["duration"])
		if err != nil {
			t.Errorf("plugin log line without a duration: %v", l)
			continue
		}
		out = append(out, d)
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(10 * time.Microsecond)
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(10 * time.Microsecond)
}
