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
