//go:build containerd

package containerd

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-chain/rdma-chain/internal/fakekubelet"
	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// Pod names of the cases; kubelet allocated rdma/hca only to rdmaPod.
const (
	plainPod     = "plain"
	rdmaPod      = "wants-rdma"
	noKubeletPod = "no-kubelet"
)

// TestContainerd runs the cases against one containerd, each with its pod.
func TestContainerd(t *testing.T) {
	e := newEnv(t, []fakekubelet.Pod{
		{Namespace: podNamespace, Name: plainPod},
		{Namespace: podNamespace, Name: rdmaPod, Resources: map[string][]string{"rdma/hca": {"mlx5_0"}}},
		{Namespace: podNamespace, Name: noKubeletPod},
	})
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"NoRDMAPodPassesThrough", testPlainPod},
		{"RDMAPodOnNodeWithoutRDMA", testRDMAPodFails},
		{"KubeletUnreachable", testKubeletGone},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			c.fn(t, e)
			t.Logf("timing: %s: %s", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
	logVerbs(t, e)
}

// pod is the sandbox config of the named pod with its annotations.
func (e *env) pod(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return podConfig(name, "uid-"+name, filepath.Join(e.dir, "pods", name), annotations)
}

// testPlainPod: a pod kubelet allocated nothing gets ptp's IP; the plugin saw
// its identity and its annotations, recorded nothing, and DEL succeeds.
func testPlainPod(t *testing.T, e *env) {
	id, err := e.cri.run(callCtx(t), e.pod(plainPod, map[string]string{config.AnnotationSMCR: "maybe"}))
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	st, err := e.cri.status(callCtx(t), id)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	_, subnet, _ := net.ParseCIDR("10.66.0.0/24")
	if ip := net.ParseIP(st.GetNetwork().GetIp()); ip == nil || !subnet.Contains(ip) {
		t.Errorf("sandbox IP %q, want one from ptp's 10.66.0.0/24", st.GetNetwork().GetIp())
	}
	lines := e.cni.logLines(t)
	expectLine(t, lines, "verb", "ADD", "container", id, "pod", podNamespace+"/"+plainPod, "outcome", "ok")
	warning := fmt.Sprintf("annotation %s=%q ignored: want \"true\" or \"false\"", config.AnnotationSMCR, "maybe")
	expectLine(t, lines, "level", "WARN", "container", id, "msg", warning)
	expectNoRecord(t, e)
	if err := e.cri.stop(callCtx(t), id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := e.cri.remove(callCtx(t), id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
	expectNoLease(t, e, id)
}

// testRDMAPodFails: a pod allocated rdma/hca on a kernel without RDMA fails
// ADD (code 100); containerd's own cleanup DEL succeeds and frees the IP.
func testRDMAPodFails(t *testing.T, e *env) {
	_, err := e.cri.run(callCtx(t), e.pod(rdmaPod, map[string]string{config.AnnotationSMCR: "true"}))
	if err == nil || !strings.Contains(err.Error(), "no RDMA subsystem") {
		t.Fatalf("RunPodSandbox: %v, want an error mentioning \"no RDMA subsystem\"", err)
	}
	t.Logf("containerd's error: %v", err)
	id := failedAdd(t, e, rdmaPod)
	expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
	expectNoRecord(t, e)
	expectNoLease(t, e, id)
}

// testKubeletGone: with the pod-resources socket gone ADD fails (code 11)
// naming the socket, and nothing stays recorded or leased.
func testKubeletGone(t *testing.T, e *env) {
	e.stopKubelet(t)
	t.Cleanup(func() { e.startKubelet(t) })
	_, err := e.cri.run(callCtx(t), e.pod(noKubeletPod, nil))
	if err == nil || !strings.Contains(err.Error(), e.cni.socket) {
		t.Fatalf("RunPodSandbox: %v, want an error naming %s", err, e.cni.socket)
	}
	t.Logf("containerd's error: %v", err)
	id := failedAdd(t, e, noKubeletPod)
	expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
	expectNoRecord(t, e)
	expectNoLease(t, e, id)
}

// failedAdd finds the plugin's failed ADD for the pod and returns the
// container ID containerd gave it (the sandbox ID CRI never returned).
func failedAdd(t *testing.T, e *env, name string) string {
	t.Helper()
	hits := find(e.cni.logLines(t), "verb", "ADD", "pod", podNamespace+"/"+name, "outcome", "error")
	if len(hits) != 1 {
		t.Fatalf("plugin log: %d failed ADD lines for pod %s/%s, want 1", len(hits), podNamespace, name)
	}
	return hits[0]["container"]
}

// expectLine fails t unless some log line has all the key/value pairs.
func expectLine(t *testing.T, lines []logLine, kv ...string) {
	t.Helper()
	if len(find(lines, kv...)) == 0 {
		t.Errorf("plugin log has no line with %q", kv)
	}
}

// expectNoRecord fails t if the plugin recorded any attachment.
func expectNoRecord(t *testing.T, e *env) {
	t.Helper()
	if recs := e.cni.attachments(t); len(recs) != 0 {
		t.Errorf("state records %v, want none", recs)
	}
}

// expectNoLease fails t if host-local still holds an IP for containerID.
func expectNoLease(t *testing.T, e *env, containerID string) {
	t.Helper()
	if held := e.cni.leases(t, containerID); len(held) != 0 {
		t.Errorf("host-local still leases %v to %s", held, containerID)
	}
}

// logVerbs reports which CNI verbs containerd sent the plugin, per container.
func logVerbs(t *testing.T, e *env) {
	counts := map[string]map[string]int{}
	for _, l := range e.cni.logLines(t) {
		if l["verb"] == "" {
			continue
		}
		if counts[l["container"]] == nil {
			counts[l["container"]] = map[string]int{}
		}
		counts[l["container"]][l["verb"]]++
	}
	for id, verbs := range counts {
		t.Logf("verbs containerd sent for container %.12s: %v", id, verbs)
	}
}
