//go:build cluster

package cluster

import (
	"regexp"
	"testing"
	"time"
)

// passAfterRestart is a reconcile pass that listed the runtime's sandboxes.
var passAfterRestart = regexp.MustCompile(`reconcile: \d+ released, \d+ kept, 0 problems \(liveness: CRI /run/containerd/containerd\.sock\)`)

// testContainerdRestart: containerd on node-a is killed and its
// supervisor starts it again, with a new socket at the same path. The
// DaemonSet mounts the socket's directory, not the socket: its reconcile
// container, not restarted, lists the sandboxes again at its next pass
// (0 problems, CRI liveness), so garbage collection goes on.
func testContainerdRestart(t *testing.T, cp *controlPlane) {
	node := nodeNames[0]
	pod := cp.dsPod(t, node)
	restartsPath := `jsonpath={.status.containerStatuses[?(@.name=="reconcile")].restartCount}`
	before, err := cp.kubectlOut("-n", "kube-system", "get", "pod", pod, "-o", restartsPath)
	if err != nil {
		t.Fatalf("restart count of %s: %v: %s", pod, err, before)
	}
	killed := time.Now().UTC().Truncate(time.Second)
	out := cp.nodeShell(t, node, `old=$(pidof containerd)
kill $old
i=0
while [ $i -lt 120 ]; do
	new=$(pidof containerd)
	[ -n "$new" ] && [ "$new" != "$old" ] && break
	sleep 1
	i=$((i + 1))
done
echo "containerd $old -> $new after $i s"`)
	t.Logf("%s: %s", node, out)
	if !regexp.MustCompile(`containerd \d+ -> \d+ after`).MatchString(out) {
		t.Fatalf("containerd on %s did not come back: %s", node, out)
	}
	logs := cp.poll(t, 5*time.Minute, passAfterRestart.MatchString,
		"-n", "kube-system", "logs", pod, "-c", "reconcile", "--since-time="+killed.Format(time.RFC3339))
	t.Logf("reconcile on %s since containerd was killed:\n%s", node, logs)
	if after, _ := cp.kubectlOut("-n", "kube-system", "get", "pod", pod, "-o", restartsPath); after != before {
		t.Errorf("reconcile on %s restarted (%s -> %s): the pass should have reached the new socket in place", node, before, after)
	}
	t.Logf("CLUSTER-TIME a reconcile pass listed the sandboxes %.0f s after containerd was killed", time.Since(killed).Seconds())
}
