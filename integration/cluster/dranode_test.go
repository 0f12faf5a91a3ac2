//go:build cluster

package cluster

import (
	"cmp"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// The node scripts run the image's iproute2 (/usr/sbin): busybox's ip,
// which its shell prefers, knows no nodad and no rdma.

// gidTable defines, for a node's shell, simrdma0's port 1, its netdev and
// free, the count of its GID table's free (zero) rows.
const gidTable = `P=/sys/class/infiniband/simrdma0/ports/1
ND=$(cat $P/gid_attrs/ndevs/0) || exit 1
free() { cat $P/gids/* | grep -c '^0000:0000:0000:0000:0000:0000:0000:0000$'; }
`

// fillGIDs gives simrdma0's netdev host addresses fd00:ee::N until fewer
// than 2 of its GID rows are free. Each address takes at least one row
// (simrdma0's take one, a RoCE v2 GID; the VM tier lists them), added by
// the RDMA core from a work queue, and an address past the table's end
// takes none: so as many addresses as free rows less one go in one ip
// process, then one more at a time should rows be left. Each process
// start costs a TCG guest dearly.
const fillGIDs = gidTable + `add() { # FIRST LAST
	seq $1 $2 | sed "s|.*|addr add fd00:ee::&/128 dev $ND nodad|" | /usr/sbin/ip -6 -batch - || exit 1
}
settle() { # until fewer than 2 rows are free, or 10 s
	j=0
	while [ "$(free)" -ge 2 ] && [ $j -lt 50 ]; do j=$((j + 1)); sleep 0.2; done
}
n=$(($(free) - 1))
[ $n -ge 1 ] && add 1 $n && settle
while [ "$(free)" -ge 2 ]; do
	n=$((n + 1))
	[ $n -le 64 ] || { echo "$(free) GID rows free after 64 addresses on $ND"; exit 1; }
	add $n $n
	settle
done
echo "$ND: $n host addresses, $(free) of $(ls $P/gids | wc -l) GID rows free"
`

// emptyGIDs takes fillGIDs' addresses away, in one ip process.
const emptyGIDs = gidTable + `/usr/sbin/ip -6 -o addr show dev $ND | grep -o 'fd00:ee::[0-9a-f]*/128' |
	sed "s|.*|addr del & dev $ND|" | /usr/sbin/ip -6 -batch -
echo "$ND: $(free) of $(ls $P/gids | wc -l) GID rows free"
`

// testDRAAttachFailed checks that a DRA pod's ADD that the plugin refuses
// shows why in its claim. On node-b, simrdma0's GID table is filled with
// host addresses, and the driver taints it gid-table-full (at its next
// reading), says so in an Event on the node, and takes the taint off once
// the rows are freed. The pod's claim tolerates the taint: the scheduler,
// which counts only claims against the port's gids capacity, places it
// there, and the plugin refuses its address (CNI error 111). The driver reads the failure from the plugin's outcome log and
// writes it into the claim (Ready False, AttachFailed, the plugin's
// message); the pod's events (kubectl describe pod) carry the plugin's
// message too, as kubelet's FailedCreatePodSandBox. With the addresses gone,
// kubelet's next try attaches the pod and the claim says so.
func testDRAAttachFailed(t *testing.T, cp *controlPlane) {
	node := nodeNames[1]
	full := healthChange{node: node, dev: "simrdma0", taint: "gid-table-full:NoSchedule", state: "ACTIVE", reason: "RDMADeviceUnhealthy"}
	cp.markHealth(t, &full)
	t.Logf("%s: %s", node, strings.TrimSpace(cp.nodeShell(t, node, fillGIDs)))
	cp.waitHealth(t, full)
	emptied := false
	t.Cleanup(func() {
		if !emptied {
			cp.nodeShell(t, node, emptyGIDs)
		}
	})
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-refused.yaml")
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	claim := cp.poll(t, 3*time.Minute, func(s string) bool { return s != "" },
		"get", "pod", "dra-refused", "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
	failed := cp.poll(t, 3*time.Minute, func(s string) bool { return strings.Contains(s, "AttachFailed") },
		"get", "resourceclaim", claim, "-o", claimStatus)
	t.Logf("CLUSTER-TIME claim %s showed the failed ADD %.1f s after kubectl apply: %s", claim, time.Since(start).Seconds(), failed)
	msg, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		`jsonpath={.status.devices[?(@.driver=="rdma-chain.github.io")].conditions[?(@.type=="Ready")].message}`)
	t.Logf("claim %s Ready message: %s", claim, msg)
	for _, want := range []string{"pod default/dra-refused", "CNI error 111", "GID table of RDMA device simrdma0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("claim %s: want %q in the Ready condition's message", claim, want)
		}
	}
	events := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "GID table of RDMA device simrdma0") },
		"get", "events", "--field-selector", "involvedObject.name=dra-refused,reason=FailedCreatePodSandBox", "-o", "jsonpath={.items[*].message}")
	t.Logf("dra-refused's FailedCreatePodSandBox events, %.1f s after kubectl apply: %s", time.Since(start).Seconds(), events)
	healed := healthChange{node: node, dev: "simrdma0", state: "ACTIVE", reason: "RDMADeviceHealthy"}
	cp.markHealth(t, &healed)
	t.Logf("%s: %s", node, strings.TrimSpace(cp.nodeShell(t, node, emptyGIDs)))
	emptied = true
	retried := time.Now()
	t.Logf("CLUSTER-TIME %s's GID rows freed %.1f s after kubectl apply", node, retried.Sub(start).Seconds())
	cp.podBecomesReady(t, "dra-refused", 5*time.Minute)
	attached := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, " True Attached") },
		"get", "resourceclaim", claim, "-o", claimStatus)
	t.Logf("CLUSTER-TIME dra-refused Ready %.1f s after the GID rows were freed; claim %s: %s", time.Since(retried).Seconds(), claim, attached)
	deleted := time.Now()
	if out, err := cp.kubectlOut("delete", "pod", "dra-refused", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
	t.Logf("CLUSTER-TIME dra-refused deleted (kubectl delete --wait) in %.1f s", time.Since(deleted).Seconds())
	cp.waitHealth(t, healed)
}

// addRXE makes a soft-RoCE device on a new veth and brings the veth up:
// link events (rtnetlink) and, where the driver has it, the RDMA monitor.
const addRXE = `/usr/sbin/ip link add rcev0 type veth peer name rcev1 || exit 1
/usr/sbin/rdma link add rxeev0 type rxe netdev rcev0 || exit 1
/usr/sbin/ip link set rcev1 up && /usr/sbin/ip link set rcev0 up || exit 1
echo "rxeev0 on rcev0, port 1 $(cat /sys/class/infiniband/rxeev0/ports/1/state)"
`

// delRXE takes addRXE's device away: the veth goes down (a link event)
// after the RDMA device is gone, then is deleted.
const delRXE = `/usr/sbin/rdma link delete rxeev0 2>/dev/null
/usr/sbin/ip link set rcev0 down 2>/dev/null
/usr/sbin/ip link del rcev0 2>/dev/null
[ ! -e /sys/class/infiniband/rxeev0 ] && ! /usr/sbin/ip link show rcev0 2>/dev/null && echo "rxeev0 and rcev0 gone"
`

var publishedLine = regexp.MustCompile(`published the node's RDMA devices.* devices=(\d+) .*trigger=(\w+)`)

// testDRAEvents checks that the driver reads the node again on the
// kernel's events, not only every --interval (30 s): an RDMA device made
// on node-b is in its ResourceSlice from a reading an event started, and
// is out of it once removed.
func testDRAEvents(t *testing.T, cp *controlPlane) {
	node := nodeNames[1]
	slice := []string{"get", "resourceslices", "--field-selector", "spec.nodeName=" + node, "-o", `jsonpath={.items[*].spec.devices[*].name}`}
	before, err := cp.kubectlOut(slice...)
	if err != nil || strings.Contains(before, "rxeev0") {
		t.Fatalf("%s's slice before: %v: %s", node, err, before)
	}
	pod, err := cp.draPodOn(node)
	if err != nil {
		t.Fatal(err)
	}
	logClockOffset(t, cp, node)
	since := time.Now().UTC().Truncate(time.Second)
	added := true
	t.Cleanup(func() {
		if added {
			cp.nodeShell(t, node, delRXE)
		}
	})
	start := time.Now()
	t.Logf("%s: %s", node, strings.TrimSpace(cp.nodeShell(t, node, addRXE)))
	made := time.Since(start)
	cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "rxeev0") }, slice...)
	t.Logf("CLUSTER-TIME rxeev0 in %s's slice %.1f s after the node script that made it started (which took %.1f s)", node, time.Since(start).Seconds(), made.Seconds())
	start = time.Now()
	t.Logf("%s: %s", node, strings.TrimSpace(cp.nodeShell(t, node, delRXE)))
	added = false
	cp.poll(t, 2*time.Minute, func(s string) bool { return !strings.Contains(s, "rxeev0") }, slice...)
	t.Logf("CLUSTER-TIME rxeev0 out of %s's slice %.1f s after the node script that removed it started", node, time.Since(start).Seconds())
	logs, err := cp.logsSince(pod, since)
	if err != nil {
		t.Fatalf("logs of %s: %v: %s", pod, err, logs)
	}
	n := len(strings.Fields(before))
	byEvent := map[int]bool{}
	for _, m := range publishedLine.FindAllStringSubmatch(logs, -1) {
		t.Logf("%s: published %s devices (trigger %s)", pod, m[1], m[2])
		k, _ := strconv.Atoi(m[1])
		byEvent[k] = byEvent[k] || m[2] == "event"
	}
	// The device's port comes up after it is made: a publish an event
	// started shows it even when an interval tick fell in between.
	if !byEvent[n+1] {
		t.Errorf("no publish of %d devices started by an event since %s", n+1, since)
	}
}

// logClockOffset prints node's clock minus this host's, a figure only: no
// failure of it fails the test. busybox's date has whole seconds only:
// the node's instant is taken as the middle of its second.
func logClockOffset(t *testing.T, cp *controlPlane, node string) {
	asked := time.Now()
	clock, err := cp.nodeExec(t, node, "date -u +%s")
	answered := time.Now()
	secs, perr := strconv.ParseInt(strings.TrimSpace(clock), 10, 64)
	if err = cmp.Or(err, perr); err != nil {
		t.Logf("%s's clock unread: %q, %v", node, clock, err)
		return
	}
	mid := asked.Add(answered.Sub(asked) / 2)
	t.Logf("CLUSTER-FIGURE %s's clock minus this host's: %+.1f s (±%.1f s)", node,
		float64(secs)+0.5-float64(mid.UnixNano())/1e9, answered.Sub(asked).Seconds()/2+0.5)
}

// testDRACapacity checks that node-a's simrdma0 is shared by claims up to
// its GID table: two pods whose claims ask for 20 of its 32 rows each do
// not both fit. The scheduler places the first and leaves the second
// Pending (Unschedulable, its claims cannot be allocated) until the first
// is deleted; then it runs.
func testDRACapacity(t *testing.T, cp *controlPlane) {
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-wide.yaml")
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	// Which pod the scheduler takes first is its choice: one runs, the
	// other waits.
	first, second := oneReady(t, cp, "dra-wide-1", "dra-wide-2")
	sched := cp.unschedulable(t, second)
	t.Logf("%s Ready; %s: %s", first, second, sched)
	if !strings.Contains(sched, "cannot allocate all claims") {
		t.Errorf("%s unschedulable for another reason than its claim: %s", second, sched)
	}
	if node, _ := cp.kubectlOut("get", "pod", second, "-o", "jsonpath={.spec.nodeName}"); node != "" {
		t.Fatalf("%s was placed on %s", second, node)
	}
	start := time.Now()
	if out, err := cp.kubectlOut("delete", "pod", first, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete %s: %v: %s", first, err, out)
	}
	cp.podBecomesReady(t, second, 5*time.Minute)
	t.Logf("CLUSTER-TIME %s Ready %.1f s after %s's delete began", second, time.Since(start).Seconds(), first)
}
