//go:build cluster

package cluster

import (
	"strings"
	"testing"
	"time"
)

// nicDown takes node's netdev down (its IPv6 addresses kept, as
// keep_addr_on_down keeps them through a maintenance) and waits until the
// DRA driver taints its RDMA device dev port-down in the node's slice, the
// DaemonSet's metrics say its port is DOWN and an Event on the node says
// why. up brings the netdev up again and waits for the taint to go, the
// port to be ACTIVE in the metrics, an Event to say so and the netdev's
// global addresses to be what they were.
func nicDown(t *testing.T, cp *controlPlane, node, netdev, dev string) (up func()) {
	t.Helper()
	globalAddrs := "ip -6 -o addr show dev " + netdev + " scope global | awk '{print $4}' | sort"
	addrs := cp.nodeShell(t, node, globalAddrs)
	down := time.Now()
	upScript := "ip link set " + netdev + " up && sysctl -qw net.ipv6.conf." + netdev + ".keep_addr_on_down=0"
	isUp := false
	t.Cleanup(func() { // a failed check leaves no NIC down for the scenarios after it
		if !isUp {
			_, _ = cp.nodeExec(t, node, upScript)
		}
	})
	cp.nodeShell(t, node, "sysctl -qw net.ipv6.conf."+netdev+".keep_addr_on_down=1 && ip link set "+netdev+" down")
	cp.waitHealth(t, node, dev, down, "port-down=DOWN:NoSchedule", "DOWN", "RDMADeviceUnhealthy")
	return func() {
		t.Helper()
		up := time.Now()
		cp.nodeShell(t, node, upScript)
		isUp = true
		cp.waitHealth(t, node, dev, up, "", "ACTIVE", "RDMADeviceHealthy")
		if now := cp.nodeShell(t, node, globalAddrs); now != addrs {
			t.Errorf("%s on %s: global addresses %q after it came up, %q before it went down", netdev, node, now, addrs)
		}
	}
}

// nodeEvents are the messages of the Events on node with reason, one a
// line.
func (cp *controlPlane) nodeEvents(node, reason string) string {
	out, _ := cp.kubectlOut("-n", "default", "get", "events", "--field-selector",
		"involvedObject.kind=Node,involvedObject.name="+node+",reason="+reason, "-o", `jsonpath={range .items[*]}{.message}{"\n"}{end}`)
	return out
}

// waitHealth waits until dev's taints in node's slice are taint (without
// the driver's domain; "" for none), the DaemonSet's metrics give its port
// state, and an Event on the node with reason names dev; it prints how
// long each took from since.
func (cp *controlPlane) waitHealth(t *testing.T, node, dev string, since time.Time, taint, state, reason string) {
	t.Helper()
	var tainted, metric, event time.Duration
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		taints, _ := cp.kubectlOut("get", "resourceslices", "--field-selector", "spec.nodeName="+node, "-o",
			`jsonpath={range .items[*].spec.devices[?(@.name=="`+dev+`")]}{range .taints[*]}{.key}={.value}:{.effect} {end}{end}`)
		taints = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(taints, "rdma-chain.github.io/", ""), "=:", ":"))
		if tainted == 0 && taints == taint {
			tainted = time.Since(since)
		}
		scrape, _ := cp.nodeExec(t, node, `wget -qO- http://127.0.0.1:9742/metrics | grep '^rdma_chain_rdma_port_info{.*device="`+dev+`"'`)
		if metric == 0 && strings.Contains(scrape, `state="`+state+`"`) {
			metric = time.Since(since)
		}
		said := cp.nodeEvents(node, reason)
		if event == 0 && strings.Contains(said, dev+" (") {
			event = time.Since(since)
		}
		return tainted > 0 && metric > 0 && event > 0,
			"taints of " + dev + ": " + taints + "; metric: " + scrape + "; " + reason + " Events: " + said
	})
	t.Logf("CLUSTER-TIME %s of %s: taints %q in the slice %.1f s, port %s in the metrics %.1f s, its %s Event %.1f s after the change; those Events: %s",
		dev, node, taint, tainted.Seconds(), state, metric.Seconds(), reason, event.Seconds(), strings.TrimSpace(cp.nodeEvents(node, reason)))
}
