//go:build cluster

package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// nicDown takes node's netdev down (its IPv6 addresses kept, as
// keep_addr_on_down keeps them through a maintenance) and waits until the
// DRA driver taints its RDMA device dev port-down in the node's slice, the
// DaemonSet's metrics say its port is DOWN and an Event new since the
// change, on the node and on each of pods (in namespace default, those
// holding dev), says why. up brings the netdev up again and waits for the
// taint to go, the port to be ACTIVE in the metrics, new Events to say so
// and the netdev's global addresses to be what they were.
func nicDown(t *testing.T, cp *controlPlane, node, netdev, dev string, pods ...string) (up func()) {
	t.Helper()
	globalAddrs := "ip -6 -o addr show dev " + netdev + " scope global | awk '{print $4}' | sort"
	addrs := cp.nodeShell(t, node, globalAddrs)
	upScript := "ip link set " + netdev + " up && sysctl -qw net.ipv6.conf." + netdev + ".keep_addr_on_down=0"
	isUp := false
	t.Cleanup(func() { // a failed check leaves no NIC down for the scenarios after it
		if !isUp {
			_, _ = cp.nodeExec(t, node, upScript)
		}
	})
	change := healthChange{node: node, dev: dev, pods: pods, taint: "port-down=DOWN:NoSchedule", state: "DOWN", reason: "RDMADeviceUnhealthy"}
	cp.markHealth(t, &change)
	cp.nodeShell(t, node, "sysctl -qw net.ipv6.conf."+netdev+".keep_addr_on_down=1 && ip link set "+netdev+" down")
	cp.waitHealth(t, change)
	return func() {
		t.Helper()
		change.taint, change.state, change.reason = "", "ACTIVE", "RDMADeviceHealthy"
		cp.markHealth(t, &change)
		cp.nodeShell(t, node, upScript)
		isUp = true
		cp.waitHealth(t, change)
		if now := cp.nodeShell(t, node, globalAddrs); now != addrs {
			t.Errorf("%s on %s: global addresses %q after it came up, %q before it went down", netdev, node, now, addrs)
		}
	}
}

// healthChange is what waitHealth waits for after a change of dev's
// health on node: its taints in the slice (without the driver's domain;
// "" for none), its port state in the DaemonSet's metrics, and an Event
// with reason naming dev on the node and each of pods that is not among
// earlier (healthEvents before the change).
type healthChange struct {
	node, dev            string
	pods                 []string
	taint, state, reason string
	earlier              []string
	since                time.Time
}

// healthEvents lists the Events with c.reason on c.node and c.pods that
// name c.dev, one a line: the object, the message and the Event's
// resourceVersion, which the second of an Event folded into its series
// changes too. (client-go's recorder writes a third and later repeat
// within 6 minutes only at its next series sweep, minutes later: a check
// waits for at most two of a kind per device.)
func (cp *controlPlane) healthEvents(c healthChange) ([]string, error) {
	var out []string
	for _, obj := range c.objects() {
		kind, name, _ := strings.Cut(obj, "/")
		said, err := cp.kubectlOut("-n", "default", "get", "events", "--field-selector",
			"involvedObject.kind="+kind+",involvedObject.name="+name+",reason="+c.reason,
			"-o", `jsonpath={range .items[*]}{.message} {.metadata.resourceVersion}{"\n"}{end}`)
		if err != nil {
			return nil, fmt.Errorf("the Events of %s: %w: %s", obj, err, said)
		}
		for _, l := range strings.Split(strings.TrimSpace(said), "\n") {
			if strings.Contains(l, c.dev+" (") {
				out = append(out, obj+": "+l)
			}
		}
	}
	return out, nil
}

// markHealth sets c.earlier to healthEvents before c's change, read again
// until a read succeeds (t fails when none does, as an Event not read then
// would count as new), and c.since to now.
func (cp *controlPlane) markHealth(t *testing.T, c *healthChange) {
	t.Helper()
	cp.pollFunc(t, time.Minute, func() (bool, string) {
		var err error
		c.earlier, err = cp.healthEvents(*c)
		return err == nil, fmt.Sprint(err)
	})
	c.since = time.Now()
}

// objects are the Event objects of c: its node, then its pods.
func (c healthChange) objects() []string {
	out := []string{"Node/" + c.node}
	for _, p := range c.pods {
		out = append(out, "Pod/"+p)
	}
	return out
}

// waitHealth waits until c is seen and prints how long each part took
// from c.since.
func (cp *controlPlane) waitHealth(t *testing.T, c healthChange) {
	t.Helper()
	var tainted, metric time.Duration
	evented := map[string]time.Duration{}
	objects := c.objects()
	cp.pollFunc(t, 2*time.Minute, func() (bool, string) {
		taints, _ := cp.kubectlOut("get", "resourceslices", "--field-selector", "spec.nodeName="+c.node, "-o",
			`jsonpath={range .items[*].spec.devices[?(@.name=="`+c.dev+`")]}{range .taints[*]}{.key}={.value}:{.effect} {end}{end}`)
		taints = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(taints, "rdma-chain.github.io/", ""), "=:", ":"))
		if tainted == 0 && taints == c.taint {
			tainted = time.Since(c.since)
		}
		scrape, _ := cp.nodeExec(t, c.node, `wget -qO- http://127.0.0.1:9742/metrics | grep '^rdma_chain_rdma_port_info{.*device="`+c.dev+`"'`)
		if metric == 0 && strings.Contains(scrape, `state="`+c.state+`"`) {
			metric = time.Since(c.since)
		}
		said, err := cp.healthEvents(c)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range said {
			obj, _, _ := strings.Cut(l, ": ")
			if _, ok := evented[obj]; !ok && !slices.Contains(c.earlier, l) {
				evented[obj] = time.Since(c.since)
			}
		}
		return tainted > 0 && metric > 0 && len(evented) == len(objects),
			"taints of " + c.dev + ": " + taints + "; metric: " + scrape + "; " + c.reason + " Events (" + strings.Join(c.earlier, "; ") +
				" before): " + strings.Join(said, "; ")
	})
	var events []string
	for _, obj := range objects {
		events = append(events, fmt.Sprintf("%s %.1f s", obj, evented[obj].Seconds()))
	}
	t.Logf("CLUSTER-TIME %s of %s: taints %q in the slice %.1f s, port %s in the metrics %.1f s, its new %s Events (%s) after the change",
		c.dev, c.node, c.taint, tainted.Seconds(), c.state, metric.Seconds(), c.reason, strings.Join(events, ", "))
}
