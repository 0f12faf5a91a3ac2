//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/inspect"
)

// hookHeld checks that hookState's output says the hook is attached and
// held (nodeShell's output is trimmed: the lines, not a prefix with
// newlines).
func hookHeld(state string) bool {
	l := strings.Split(state, "\n")
	return len(l) >= 2 && l[0] == "attached 1" && l[1] == "held 1"
}

// hookState prints node-a's SMC socket hook as the hook binary reads it
// (attached, held, then one listed netns inode per line).
const hookState = "/host/opt/cni/bin/rdma-chain-smc-hook state /host/sys/fs/bpf/rdma-chain"

// orphanScript runs on a node with a pod's netns inode: it stops kubelet
// (SIGSTOP: its supervisor does not restart it, and it calls no CNI DEL
// while stopped), kills every process in the netns, removes the netns pin,
// and waits until undone (a shell condition) holds, as only the
// DaemonSet's reconcile can undo the pod's attachment then; pre runs
// first and exits 1 when the pod is not as the case needs; report prints
// what undid it. kubelet is resumed on every exit.
func orphanScript(ino uint64, pre, undone, report string) string {
	return fmt.Sprintf(`INO=%d
%s
PIN=
for f in /host/run/netns/* /host/var/run/netns/*; do
	[ "$(stat -c %%i "$f" 2>/dev/null)" = "$INO" ] && { PIN=${f#/host}; break; }
done
[ -n "$PIN" ] || { echo "no netns pin of inode $INO:"; ls -l /host/run/netns; exit 1; }
KUBELET=$(pidof kubelet)
case "$KUBELET" in ''|*[!0-9]*) echo "kubelet's pid: '$KUBELET'"; exit 1 ;; esac
kill -STOP "$KUBELET" || exit 1
trap 'kill -CONT "$KUBELET"' EXIT
(sleep 300; kill -CONT "$KUBELET") &
T0=$(cut -d' ' -f1 /proc/uptime)
el() { awk -v t0="$T0" '{printf "%%.0f", $1 - t0}' /proc/uptime; }
echo "kubelet ($KUBELET) stopped"
pids() { for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/net" 2>/dev/null)" = "net:[$INO]" ] && echo "${p#/proc/}"; done; }
i=0
while [ -n "$(pids)" ]; do
	kill -9 $(pids) 2>/dev/null
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "processes in the pod's netns survive: $(pids)"; exit 1; }
	sleep 0.2
done
# This pod's copy of the host's mounts holds the netns too: its copy
# goes, then the node's pin.
umount "/host$PIN" 2>/dev/null
nsenter -t 1 -m /bin/busybox sh -c 'umount "$1" 2>/dev/null; rm -f "$1"; ! test -e "$1"' - "$PIN" || { echo "the pin $PIN stays: $(ls -l /host$PIN)"; exit 1; }
echo "netns $PIN: no process left in it, pin removed at +$(el) s"
until %s; do
	[ "$(el)" -lt 180 ] || { echo "not undone $(el) s after its netns died:"; %s; exit 1; }
	sleep 1
done
echo "undone at +$(el) s, kubelet $(grep State /proc/$KUBELET/status)"
%s
`, ino, pre, undone, report, report)
}

// reconcileLog is the DaemonSet's reconcile containers' logs on the node.
const reconcileLog = "/host/var/log/pods/kube-system_rdma-chain-*/reconcile/*.log"

var netnsInode = regexp.MustCompile(`^net:\[(\d+)\]$`)

// testOrphanedSMCR runs an SMC-R pod on node-a with its pnet entries in
// place (the node tier's check), then kills its netns while kubelet is
// stopped, so no DEL comes. Its netns inode must not stay in the node-wide
// SMC socket hook map, where a later pod's netns reusing the inode would
// have its TCP sockets made SMC: the DaemonSet's reconcile (CRI still lists
// the sandbox) releases the attachment and the inode is unlisted before
// kubelet runs again. Resumed, kubelet's DEL finds nothing left and
// succeeds; the hook stays held, with nothing listed.
func testOrphanedSMCR(t *testing.T, cp *controlPlane) {
	node := nodeNames[0]
	cp.podReady(t, "smcr-orphan", 5*time.Minute)
	assertPnetEntries(t, cp, node, "default/smcr-orphan")
	out, err := cp.exec("smcr-orphan", "/bin/busybox", "readlink", "/proc/1/ns/net")
	m := netnsInode.FindStringSubmatch(strings.TrimSpace(out))
	if err != nil || m == nil {
		t.Fatalf("the pod's netns: %v: %q", err, out)
	}
	start := time.Now()
	script := orphanScript(atoi(t, m[1]), `listed() { `+hookState+` | grep -qx "$INO"; }
listed || { echo "inode $INO is not listed in the hook:"; `+hookState+`; exit 1; }`,
		"! listed", hookState+` | sed 's/^/hook: /'
grep -h 'msg="released an attachment" .*pod default/smcr-orphan' `+reconcileLog)
	out, ok := cp.debugWait(t, cp.debugStart(t, node, testImage, "/bin/busybox", "sh", "-c", script), 8*time.Minute)
	t.Logf("on %s, kubelet stopped (%.0f s):\n%s", node, time.Since(start).Seconds(), out)
	if !ok || !strings.Contains(out, "undone at +") || !strings.Contains(out, "is gone while CRI still lists the sandbox") {
		t.Fatalf("want the inode unlisted by reconcile's release while kubelet was stopped")
	}
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "True" },
		"get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if out, err := cp.kubectlOut("delete", "pod", "smcr-orphan", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete pod: %v: %s", err, out)
	}
	after := cp.nodeShell(t, node, hookState+`
grep 'verb=DEL .*pod=default/smcr-orphan ' /host/var/log/rdma-chain.log | sed 's/^/DEL: /'`)
	t.Logf("on %s after the pod's delete:\n%s", node, after)
	if !strings.HasPrefix(after, "attached 1\nheld 1\n") || regexp.MustCompile(`(?m)^\d+$`).MatchString(after) {
		t.Errorf("want the hook attached and held with no netns listed")
	}
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "DEL: ") && !strings.Contains(line, " outcome=ok") {
			t.Errorf("a DEL of smcr-orphan failed: %s", line)
		}
	}
}

// testOrphanedExclusive kills the netns of pod, which holds twoRootNode's
// eth2 and simrdma1 in exclusive mode (testExclusiveDRA), while kubelet
// is stopped, so no DEL comes. The kernel gives a physical NIC and its
// RDMA device back to the node when the netns dies, under another name
// and without the node's address: the DaemonSet's reconcile must repair
// them from the pod's record (eth2 with its /64, simrdma1 on it) before
// kubelet runs again. Resumed, kubelet gives the pod a new sandbox, whose
// ADD moves both into it again.
func testOrphanedExclusive(t *testing.T, cp *controlPlane, pod string, chars []string) {
	node := twoRootNode
	// One pod's get is the pod, not a list.
	ids := `jsonpath={.status.containerStatuses[*].containerID}`
	before, err := cp.kubectlOut("get", "pod", pod, "-o", ids)
	if err != nil || !strings.HasPrefix(before, "containerd://") {
		t.Fatalf("%s's container: %v: %q", pod, err, before)
	}
	out, err := cp.exec(pod, "/bin/busybox", "readlink", "/proc/1/ns/net")
	m := netnsInode.FindStringSubmatch(strings.TrimSpace(out))
	if err != nil || m == nil {
		t.Fatalf("%s's netns: %v: %q", pod, err, out)
	}
	home := `home() { /usr/sbin/ip -6 -o addr show dev eth2 2>/dev/null | grep -q 'fd00:20:2::1/64' && /usr/sbin/rdma link 2>/dev/null | grep -q 'simrdma1/1 .*netdev eth2 *$'; }
repaired() { grep -q 'msg="repaired an attachment" .*pod default/` + pod + `, exclusive' ` + reconcileLog + `; }`
	start := time.Now()
	script := orphanScript(atoi(t, m[1]), home+`
! home || { echo "eth2 with its address is on the node while `+pod+` holds it"; exit 1; }`,
		"home && repaired", `echo "eth2: $(/usr/sbin/ip -o addr show dev eth2 | tr -s ' ' | cut -d' ' -f4 | xargs)"
/usr/sbin/rdma link | grep simrdma1
grep -h 'msg="repaired an attachment" .*pod default/`+pod+`, exclusive' `+reconcileLog)
	out, ok := cp.debugWait(t, cp.debugStart(t, node, testImage, "/bin/busybox", "sh", "-c", script), 8*time.Minute)
	t.Logf("on %s, kubelet stopped (%.0f s):\n%s", node, time.Since(start).Seconds(), out)
	if !ok || !strings.Contains(out, "undone at +") {
		t.Fatalf("want eth2 and simrdma1 repaired on %s by reconcile while kubelet was stopped", node)
	}
	start = time.Now()
	cp.poll(t, 3*time.Minute, func(s string) bool { return s == "True" },
		"get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	testenv.Eventually(t, 5*time.Minute, func() (bool, string) {
		now, err := cp.kubectlOut("get", "pod", pod, "-o", ids)
		done := err == nil && now != before && strings.HasPrefix(now, "containerd://")
		if !done {
			time.Sleep(time.Second)
		}
		return done, fmt.Sprintf("the pod's container: %s (%v), before %s", now, err, before)
	})
	cp.podBecomesReady(t, pod, 5*time.Minute)
	t.Logf("CLUSTER-TIME %s Ready in a new sandbox %.1f s after kubelet resumed", pod, time.Since(start).Seconds())
	assertHoldsNIC(t, cp, pod, "exclusive", chars)
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// assertPnetEntries checks that, while pod runs, rdma-chain's inspect on
// node (the DaemonSet pod's reconcile container) finds its attachment
// healthy with an SMC-R pnet entry, which inspect checks in the kernel's
// tables: the node's for the RDMA port and the pod netns' for its
// interface.
func assertPnetEntries(t *testing.T, cp *controlPlane, node, pod string) {
	t.Helper()
	out, err := cp.execIn([]string{"-n", "kube-system", cp.dsPod(t, node), "-c", "reconcile"}, "/rdma-chain-ops", "inspect", "--json")
	if err != nil {
		t.Fatalf("inspect on %s: %v: %s", node, err, out)
	}
	var r inspect.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("inspect on %s: %v: %s", node, err, out)
	}
	for _, a := range r.Attachments {
		if a.Pod != pod {
			continue
		}
		t.Logf("inspect on %s: %s: smcr %q, healthy %v %v; node pnet table %+v", node, pod, a.SMCR, a.Healthy, a.Problems, r.SMC.Pnet)
		if a.SMCR == "" || !a.Healthy || !slices.ContainsFunc(r.SMC.Pnet, func(p inspect.PnetRow) bool { return p.IB != "" }) {
			t.Errorf("want %s's SMC-R pnet entries in place", pod)
		}
		return
	}
	t.Errorf("inspect on %s lists no attachment of %s: %s", node, pod, out)
}
