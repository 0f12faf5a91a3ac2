//go:build cluster

package cluster

import (
	"errors"
	"strings"
	"testing"
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

func TestAddLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		pod  string
		ok   bool
	}{
		{`time=2026-11-26T03:40:01.123Z level=INFO msg=done plugin=rdma-chain verb=ADD container=abc pod=default/p ifname=eth0 duration=312.5ms outcome=ok`, "default/p", true},
		{`time=2026-11-26T03:40:01.123Z level=ERROR msg=failed verb=ADD container=abc pod=default/p ifname=eth0 duration=1.2s code=11 outcome=error error="x"`, "", false},
		{`level=INFO msg=done verb=ADD pod=default/p duration=bogus outcome=ok`, "", false},
		{``, "", false},
	} {
		pod, _, ok := addLine(tc.line)
		if ok != tc.ok || (ok && pod != tc.pod) {
			t.Errorf("addLine(%q) = %q, %v; want %q, %v", tc.line, pod, ok, tc.pod, tc.ok)
		}
	}
}
