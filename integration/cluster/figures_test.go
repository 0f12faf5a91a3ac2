//go:build cluster

package cluster

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"
)

// testPluginShare reads how long each of the plugin's calls took from its own
// log on each node (logFile of the cluster's entry) and checks that every pod
// the tier gave RDMA has an ADD there that succeeded and attached. Printed
// beside the pods' created-to-Ready times above, it is the plugin's share of a
// pod's start. An ADD whose container has an "attached" line gave the pod
// RDMA; the others passed the pod through.
func testPluginShare(t *testing.T, cp *controlPlane) {
	var adds []time.Duration
	kinds := map[string][]time.Duration{}
	seen := map[string]bool{}
	for _, node := range nodeNames {
		out := cp.nodeShell(t, node, `grep -E 'msg=(done .*verb=ADD|attached) ' /host/var/log/rdma-chain.log || true`)
		attached := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if l, ok := parsePluginLine(line); ok && l.msg == "attached" {
				attached[l.container] = true
			}
		}
		for _, line := range strings.Split(out, "\n") {
			l, ok := parsePluginLine(line)
			if !ok || l.msg != "done" {
				continue
			}
			kind := addKind(l.pod, attached[l.container])
			seen[l.pod] = seen[l.pod] || attached[l.container]
			adds = append(adds, l.took)
			kinds[kind] = append(kinds[kind], l.took)
			t.Logf("CLUSTER-FIGURE %s: plugin ADD of %s (%s) took %s", node, l.pod, kind, l.took)
		}
	}
	for _, want := range []string{"default/lingjun-rping-", "default/dra-trainer"} {
		found := false
		for pod, rdma := range seen {
			found = found || (rdma && strings.HasPrefix(pod, want))
		}
		if !found {
			t.Errorf("no successful ADD that attached RDMA to %s* in the plugin's logs (pods with an ADD, and whether it attached: %v)", want, seen)
		}
	}
	if len(adds) == 0 {
		return
	}
	t.Logf("CLUSTER-FIGURE plugin ADD on the cluster: %d calls, median %s, max %s (pods' created-to-Ready above)",
		len(adds), median(adds), slices.Max(adds))
	// Each against the device-plugin pods' shared-mode attachment: a DRA
	// pod's devices come from pod-resources' dynamic_resources in the same
	// List call; an SMC-R pod's ADD also writes its pnet entry and lists its
	// netns in the socket hook's map (the first of a node loads the hook).
	base := kinds["device plugin"]
	for _, kind := range []string{"DRA", "SMC-R", "pass-through"} {
		if len(kinds[kind]) > 0 && len(base) > 0 {
			t.Logf("CLUSTER-FIGURE plugin ADD %s: median %s (%d calls) against device-plugin pods' %s (%d calls): %.2fx",
				kind, median(kinds[kind]), len(kinds[kind]), median(base), len(base), float64(median(kinds[kind]))/float64(median(base)))
		}
	}
}

// addKind names what an ADD of pod did, for the figures: the tier's DRA
// and SMC-R pods are named so.
func addKind(pod string, attached bool) string {
	switch {
	case !attached:
		return "pass-through"
	case strings.HasPrefix(pod, "default/dra-"):
		return "DRA"
	case strings.HasPrefix(pod, "default/smcr-"):
		return "SMC-R"
	}
	return "device plugin"
}

// median is the middle of v (not empty; the upper middle of an even
// count), v left as it is.
func median[T cmp.Ordered](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// pluginLine is what the figures read of one of the plugin's log lines.
type pluginLine struct {
	msg, pod, container string
	took                time.Duration
}

// parsePluginLine reads a line of a successful ADD ("... msg=done
// plugin=rdma-chain verb=ADD container=ID pod=NS/NAME ... duration=D
// outcome=ok") or of an attachment made ("... msg=attached container=ID
// ..."); any other line is not ok.
func parsePluginLine(line string) (pluginLine, bool) {
	var l pluginLine
	var verb, outcome string
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "msg":
			l.msg = v
		case "verb":
			verb = v
		case "pod":
			l.pod = v
		case "container":
			l.container = v
		case "outcome":
			outcome = v
		case "duration":
			d, err := time.ParseDuration(v)
			if err != nil {
				return pluginLine{}, false
			}
			l.took = d
		}
	}
	switch l.msg {
	case "attached":
		return l, l.container != ""
	case "done":
		return l, verb == "ADD" && outcome == "ok" && l.pod != "" && l.took > 0
	}
	return pluginLine{}, false
}
