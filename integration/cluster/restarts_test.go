//go:build cluster

package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testenv"
)

// diesScript runs on node-a as root in the node's own root (chroot /host
// of a kubectl debug node pod): kubelet held down, containerd restarted
// (a new socket), the SMC-R pod's processes killed and its netns pin
// removed: the pod's netns dies and no DEL comes. It then waits for the
// DaemonSet's reconcile, through the restarted runtime, to release the
// attachment and the socket hook to list no netns, and lets kubelet start
// again.
const diesScript = `set -u
metric() { wget -qO- http://127.0.0.1:9742/metrics | sed -n "s/^$1 //p"; }
up() { cut -d' ' -f1 /proc/uptime; }
REC=$(grep -l '"name": *"smcr-dies"' /var/lib/cni/rdma-chain/attachments/* | head -n1)
NS=$(sed -n 's/.*"netns": *"\([^"]*\)".*/\1/p' "$REC" | head -n1)
[ -n "$NS" ] || { echo "no record of smcr-dies"; exit 1; }
echo "record $REC netns $NS; hook lists $(metric rdma_chain_smc_socket_hook_netns) netns"
touch /run/hold-kubelet
kill $(pidof kubelet)
i=0; while pidof kubelet >/dev/null; do i=$((i+1)); [ $i -le 300 ] || { echo "kubelet still runs"; exit 1; }; sleep 0.1; done
echo "kubelet stopped up=$(up)"
old=$(stat -c %i /run/containerd/containerd.sock)
kill $(pidof containerd)
i=0; until [ -S /run/containerd/containerd.sock ] && [ "$(stat -c %i /run/containerd/containerd.sock)" != "$old" ]; do
	i=$((i+1)); [ $i -le 600 ] || { echo "containerd not back"; rm -f /run/hold-kubelet; exit 1; }; sleep 0.1
done
echo "containerd restarted up=$(up): socket inode $old -> $(stat -c %i /run/containerd/containerd.sock)"
kill -9 $(/usr/sbin/ip netns pids "$(basename "$NS")") 2>/dev/null
umount "$NS" && rm "$NS" || { echo "cannot remove $NS"; rm -f /run/hold-kubelet; exit 1; }
gone=$(up)
echo "netns $NS gone up=$gone, no DEL (kubelet down)"
i=0; until [ "$(metric rdma_chain_smc_socket_hook_netns)" = 0 ] && [ ! -e "$REC" ]; do
	i=$((i+1)); [ $i -le 200 ] || break; sleep 1
done
echo "after $i s: hook lists $(metric rdma_chain_smc_socket_hook_netns) netns; record $( [ -e "$REC" ] && echo kept || echo released)"
grep -h "reconcile: " /var/log/pods/kube-system_rdma-chain-*/reconcile/*.log | grep -v "^.*keeping" | tail -n 4 | cut -c1-400
rm -f /run/hold-kubelet
[ "$(metric rdma_chain_smc_socket_hook_netns)" = 0 ] && [ ! -e "$REC" ]`

// testPodDiesWithoutDel: an SMC-R pod on node-a dies while kubelet is
// down and after containerd restarted with a new socket (diesScript). The
// DaemonSet's reconcile, which mounts the runtime's socket directory, asks
// the restarted runtime, finds the sandbox still listed but its netns
// gone, and releases the attachment: the socket hook lists no netns, and
// its log says why. Kubelet back, the pod runs again in a new sandbox.
func testPodDiesWithoutDel(t *testing.T, cp *controlPlane) {
	manifest := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/smcr-dies.yaml")
	if out, err := cp.kubectlOut("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", manifest, "--wait=false") })
	ready := func() {
		cp.poll(t, 10*time.Minute, func(s string) bool { return s == "True" },
			"get", "pod", "smcr-dies", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}
	ready()
	sandbox := func() string {
		out, _ := cp.kubectlOut("get", "pod", "smcr-dies", "-o", `jsonpath={.status.containerStatuses[0].containerID}`)
		return out
	}
	first := sandbox()
	out, ok := cp.debugWait(t, cp.debugStart(t, nodeNames[0], testImage, "/bin/busybox", "chroot", "/host", "/bin/sh", "-c", diesScript), 15*time.Minute)
	t.Logf("node-a:\n%s", out)
	if !ok {
		t.Fatalf("the dead pod's attachment was not released, or the hook still lists its netns")
	}
	if !strings.Contains(out, "smcr-dies") || !strings.Contains(out, "is gone while CRI still lists the sandbox") {
		t.Errorf("reconcile's log does not say why it released smcr-dies")
	}
	cp.poll(t, 10*time.Minute, func(s string) bool { return s != "" && s != first },
		"get", "pod", "smcr-dies", "-o", `jsonpath={.status.containerStatuses[0].containerID}`)
	ready()
	t.Logf("smcr-dies runs again: container %s, was %s", sandbox(), first)
}
