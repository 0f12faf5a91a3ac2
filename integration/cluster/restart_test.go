//go:build cluster

package cluster

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// passAfterRestart is a reconcile pass that listed the runtime's sandboxes.
var passAfterRestart = regexp.MustCompile(`msg="pass done" released=\d+ kept=\d+ problems=0 liveness="CRI /run/containerd/containerd\.sock"`)

// testContainerdRestart kills containerd on node-a, and its supervisor
// starts it again, with a new socket at the same path. The DaemonSet
// mounts the socket's directory, not the socket: its reconcile
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
	old := strings.TrimSpace(cp.nodeShell(t, node, "pidof containerd"))
	if !regexp.MustCompile(`^\d+$`).MatchString(old) {
		t.Fatalf("containerd's pid on %s: %q", node, old)
	}
	killed := time.Now().UTC().Truncate(time.Second)
	// The exec that kills containerd runs through it: its own end may be
	// an error; the pid that follows is what counts.
	_, _ = cp.nodeExec(t, node, "kill "+old)
	var now string
	testenv.Eventually(t, 5*time.Minute, func() (bool, string) {
		out, err := cp.nodeExec(t, node, "pidof containerd")
		now = out
		if err != nil || now == "" || now == old {
			time.Sleep(time.Second)
			return false, fmt.Sprintf("containerd on %s: pid %q (was %s): %v", node, now, old, err)
		}
		return true, ""
	})
	t.Logf("containerd on %s: pid %s killed, %s running %.0f s later", node, old, now, time.Since(killed).Seconds())
	logs := cp.poll(t, 5*time.Minute, passAfterRestart.MatchString,
		"-n", "kube-system", "logs", pod, "-c", "reconcile", "--since-time="+killed.Format(time.RFC3339))
	t.Logf("reconcile on %s since containerd was killed:\n%s", node, logs)
	if after, _ := cp.kubectlOut("-n", "kube-system", "get", "pod", pod, "-o", restartsPath); after != before {
		t.Errorf("reconcile on %s restarted (%s -> %s): the pass should have reached the new socket in place", node, before, after)
	}
	t.Logf("CLUSTER-TIME a reconcile pass listed the sandboxes %.0f s after containerd was killed", time.Since(killed).Seconds())
}
