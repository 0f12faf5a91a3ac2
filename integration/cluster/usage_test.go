//go:build cluster

package cluster

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// usageSeries scrapes node's DaemonSet metrics for the per-pod RDMA usage
// series (the tier's entry passes --metrics-pod-labels) and returns, by
// pod name, each series' value keyed "TYPE@DEVICE" (objects) or
// "mr_bytes@DEVICE", and the lines read.
func (cp *controlPlane) usageSeries(t *testing.T, node string) (map[string]map[string]float64, string) {
	t.Helper()
	out, _ := cp.nodeExec(t, node, `wget -qO- http://127.0.0.1:9742/metrics | grep -E '^rdma_chain_(pod_rdma_|rdma_objects_unattributed)'; true`)
	return parseUsage(out), out
}

var (
	usageLine  = regexp.MustCompile(`^rdma_chain_pod_rdma_(objects|mr_bytes)\{([^}]*)\} (\S+)$`)
	usageLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)
)

// parseUsage reads usageSeries' map from the Prometheus text lines of the
// per-pod series.
func parseUsage(text string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		m := usageLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range usageLabel.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil || labels["pod"] == "" {
			continue
		}
		key := "mr_bytes@" + labels["device"]
		if m[1] == "objects" {
			key = labels["type"] + "@" + labels["device"]
		}
		if out[labels["pod"]] == nil {
			out[labels["pod"]] = map[string]float64{}
		}
		out[labels["pod"]][key] = v
	}
	return out
}

// holding reports whether series of one pod show a QP, an MR and MR bytes
// on one device.
func holding(series map[string]float64) bool {
	for key, v := range series {
		typ, dev, _ := strings.Cut(key, "@")
		if typ == "qp" && v > 0 && series["mr@"+dev] > 0 && series["mr_bytes@"+dev] > 0 {
			return true
		}
	}
	return false
}

// testPodUsage checks the per-pod usage series of pods (on node) around
// an rping between them over addr: before it neither holds a QP, while it
// runs each holds QPs, MRs and MR bytes on the device carrying it, and
// once rping is killed neither holds any again.
func testPodUsage(t *testing.T, cp *controlPlane, node, server, client, addr string) {
	t.Helper()
	pods := []string{server, client}
	cp.waitNoneHolding(t, node, pods, "before rping started")
	start := time.Now()
	stopServer := cp.execBackground("exec", server, "--", "/bin/busybox", "timeout", "150", "/usr/bin/rping", "-s", "-a", addr)
	defer stopServer()
	cp.pollFunc(t, time.Minute, func() (bool, string) {
		out, err := cp.exec(server, "/usr/sbin/rdma", "resource", "show", "cm_id")
		return err == nil && rpingListening(out, addr), "rping server not listening: " + out
	})
	stopClient := cp.execBackground("exec", client, "--", "/bin/busybox", "timeout", "120", "/usr/bin/rping", "-c", "-a", addr)
	defer stopClient()
	var during map[string]map[string]float64
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		series, out := cp.usageSeries(t, node)
		during = series
		return holding(series[server]) && holding(series[client]), "per-pod series while rping runs:\n" + out +
			"\nclient: " + podQPs(cp, client)
	})
	t.Logf("CLUSTER-FIGURE per-pod RDMA usage on %s while rping runs, %.1f s after the server started: %s: %s; %s: %s",
		node, time.Since(start).Seconds(), server, usageString(during[server]), client, usageString(during[client]))
	// Either end's rping may already have ended with the other's: the
	// poll below checks that none holds a QP any more.
	for _, pod := range pods {
		_, _ = cp.exec(pod, "/bin/busybox", "killall", "rping")
	}
	stopped := time.Now()
	cp.waitNoneHolding(t, node, pods, "after rping was killed")
	t.Logf("CLUSTER-TIME per-pod series without a QP %.1f s after rping was killed", time.Since(stopped).Seconds())
}

// waitNoneHolding waits until node's per-pod series show none of pods
// holding a QP (holding); when says when, for a failure's message.
func (cp *controlPlane) waitNoneHolding(t *testing.T, node string, pods []string, when string) {
	t.Helper()
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		series, out := cp.usageSeries(t, node)
		return !slices.ContainsFunc(pods, func(p string) bool { return holding(series[p]) }), "RDMA objects held " + when + ":\n" + out
	})
}

// podQPs is what the pod's rdma tool lists of its QPs, for a
// failure's message.
func podQPs(cp *controlPlane, pod string) string {
	out, _ := cp.exec(pod, "/usr/sbin/rdma", "resource", "show", "qp")
	return out
}

// usageString prints one pod's series, sorted.
func usageString(series map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(series)) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, series[k]))
	}
	return strings.Join(parts, " ")
}

// assertUsageGone fails t unless node's metrics come to name none of
// pods, once they are deleted.
func assertUsageGone(t *testing.T, cp *controlPlane, node string, pods ...string) {
	t.Helper()
	deleted := time.Now()
	cp.pollFunc(t, time.Minute, func() (bool, string) {
		out, _ := cp.nodeExec(t, node, `wget -qO- http://127.0.0.1:9742/metrics | grep 'pod="'; true`)
		return !slices.ContainsFunc(pods, func(p string) bool { return strings.Contains(out, `pod="`+p+`"`) }),
			"series naming the deleted pods:\n" + out
	})
	t.Logf("CLUSTER-TIME %s's metrics name none of %v %.1f s after their delete ended", node, pods, time.Since(deleted).Seconds())
}
