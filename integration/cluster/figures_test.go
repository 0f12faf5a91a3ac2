//go:build cluster

package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// testPluginShare: the plugin's own log on each node (logFile of the
// cluster's entry) says how long each of its calls took; every pod the
// tier gave RDMA has an ADD there that succeeded. Printed beside the pods'
// created-to-Ready times above, it is the plugin's share of a pod's start.
func testPluginShare(t *testing.T, cp *controlPlane) {
	var adds, draAdds, dpAdds []time.Duration
	seen := map[string]bool{}
	for _, node := range nodeNames {
		out := cp.nodeShell(t, node, `grep 'msg=done .*verb=ADD ' /host/var/log/rdma-chain.log || true`)
		for _, line := range strings.Split(out, "\n") {
			pod, d, ok := addLine(line)
			if !ok {
				continue
			}
			seen[pod] = true
			adds = append(adds, d)
			switch {
			case strings.HasPrefix(pod, "default/dra-"):
				draAdds = append(draAdds, d)
			case !strings.HasPrefix(pod, "default/smcr-"): // SMC-R does more
				dpAdds = append(dpAdds, d)
			}
			t.Logf("CLUSTER-FIGURE %s: plugin ADD of %s took %s", node, pod, d)
		}
	}
	for _, want := range []string{"default/lingjun-rping-", "default/dra-trainer"} {
		found := false
		for pod := range seen {
			found = found || strings.HasPrefix(pod, want)
		}
		if !found {
			t.Errorf("no successful ADD of %s* in the plugin's logs (pods with an ADD: %v)", want, seen)
		}
	}
	if len(adds) == 0 {
		return
	}
	t.Logf("CLUSTER-FIGURE plugin ADD on the cluster: %d calls, median %s, max %s (pods' created-to-Ready above)",
		len(adds), median(adds), slices.Max(adds))
	// The same shared-mode attachment on the same kind of port: a DRA pod's
	// devices come from pod-resources' dynamic_resources, a device-plugin
	// pod's from its devices, in the one List call.
	if len(draAdds) > 0 && len(dpAdds) > 0 {
		t.Logf("CLUSTER-FIGURE plugin ADD with DRA: median %s (%d calls); with device plugins: median %s (%d calls); %.2fx",
			median(draAdds), len(draAdds), median(dpAdds), len(dpAdds), float64(median(draAdds))/float64(median(dpAdds)))
	}
}

// median of ds (not empty), which it sorts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// addLine reads the pod and duration of one of the plugin's log lines of a
// successful call ("... msg=done plugin=rdma-chain verb=ADD ... pod=NS/NAME
// ... duration=D outcome=ok").
func addLine(line string) (string, time.Duration, bool) {
	var pod string
	var d time.Duration
	ok := false
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "pod":
			pod = v
		case "duration":
			var err error
			d, err = time.ParseDuration(v)
			if err != nil {
				return "", 0, false
			}
		case "outcome":
			ok = v == "ok"
		}
	}
	return pod, d, ok && pod != "" && d > 0
}
