package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// smcrShare compares, from the plugin's own timing lines ("NODE-PLUGIN
// shared verb=ADD pod=default/NAME-node duration=D outcome=ok"), the ADD
// of the SMC-R pods (erdma-smcr-*) with that of the plain shared RDMA pods
// (rping-*, hca) of the same run: medians and their ratio ("" without
// both).
func smcrShare(lines []string) string {
	var smcr, plain []time.Duration
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 6 || f[0] != "NODE-PLUGIN" || f[1] != "shared" || f[2] != "verb=ADD" || f[5] != "outcome=ok" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimPrefix(f[4], "duration="))
		if err != nil {
			continue
		}
		switch pod := strings.TrimPrefix(f[3], "pod=default/"); {
		case strings.HasPrefix(pod, "erdma-smcr-"):
			smcr = append(smcr, d)
		case strings.HasPrefix(pod, "rping-"), pod == "hca-node":
			plain = append(plain, d)
		}
	}
	if len(smcr) == 0 || len(plain) == 0 {
		return ""
	}
	ms, mp := median(smcr), median(plain)
	return fmt.Sprintf("NODE-FIGURE SMC-R pod ADD median %s (%d) against plain shared pod ADD median %s (%d): %.2fx",
		ms, len(smcr), mp, len(plain), ms.Seconds()/mp.Seconds())
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	if n := len(ds); n%2 == 0 {
		return (ds[n/2-1] + ds[n/2]) / 2
	}
	return ds[len(ds)/2]
}

func TestSMCRShare(t *testing.T) {
	lines := []string{
		"NODE-PLUGIN shared verb=ADD pod=default/rping-server-node duration=400ms outcome=ok",
		"NODE-PLUGIN shared verb=ADD pod=default/rping-client-node duration=200ms outcome=ok",
		"NODE-PLUGIN shared verb=ADD pod=default/hca-node duration=300ms outcome=ok",
		"NODE-PLUGIN shared verb=ADD pod=default/no-rdma-node duration=10ms outcome=ok",
		"NODE-PLUGIN shared verb=DEL pod=default/erdma-smcr-a-node duration=9s outcome=ok",
		"NODE-PLUGIN shared verb=ADD pod=default/erdma-smcr-a-node duration=450ms outcome=ok",
		"NODE-PLUGIN shared verb=ADD pod=default/erdma-smcr-b-node duration=5s outcome=error",
		"NODE-PLUGIN shared verb=ADD pod=default/erdma-smcr-b-node duration=350ms outcome=ok",
		"NODE-PLUGIN exclusive verb=ADD pod=default/erdma-smcr-c-node duration=9s outcome=ok",
		"NODE-TIME something else",
	}
	want := "NODE-FIGURE SMC-R pod ADD median 400ms (2) against plain shared pod ADD median 300ms (3): 1.33x"
	if got := smcrShare(lines); got != want {
		t.Errorf("smcrShare = %q\nwant       %q", got, want)
	}
	if got := smcrShare(lines[:4]); got != "" {
		t.Errorf("without SMC-R pods: %q, want none", got)
	}
}
