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

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// Pod names of the cases; kubelet allocated rdma/hca only to rdmaPod and to
// the "-rdma" pods of the batches (see batchPods).
const (
	plainPod     = "plain"
	rdmaPod      = "wants-rdma"
	noKubeletPod = "no-kubelet"
)

// kubeletPods is what the fake kubelet's pod-resources API serves.
func kubeletPods() []fakekubelet.Pod {
	pods := []fakekubelet.Pod{
		{Namespace: podNamespace, Name: plainPod},
		{Namespace: podNamespace, Name: rdmaPod, Resources: map[string][]string{"rdma/hca": {"mlx5_0"}}},
		{Namespace: podNamespace, Name: noKubeletPod},
	}
	for _, b := range []struct {
		prefix string
		n      int
	}{{"batch", batchSize}, {"conc", concurrency}, {"smcr", 4}, {"restart", 1}} {
		for i := 0; i < b.n; i++ {
			name, rdma := batchPod(b.prefix, i)
			p := fakekubelet.Pod{Namespace: podNamespace, Name: name}
			if rdma {
				p.Resources = map[string][]string{"rdma/hca": {fmt.Sprintf("mlx5_%d", i)}}
			}
			pods = append(pods, p)
		}
	}
	return pods
}

// batchPod names pod i of a batch; odd ones were allocated rdma/hca.
func batchPod(prefix string, i int) (string, bool) {
	if i%2 == 1 {
		return fmt.Sprintf("%s-%02d-rdma", prefix, i), true
	}
	return fmt.Sprintf("%s-%02d", prefix, i), false
}

// TestContainerd runs every case on each runtime at cniVersion 0.4.0 (as
// Terway writes its conflist) and 1.1.0, one containerd per combination.
func TestContainerd(t *testing.T) {
	for _, rt := range runtimes() {
		for _, version := range []string{"0.4.0", "1.1.0"} {
			t.Run(rt.name+"/cni-"+version, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				e := newEnv(t, rt, version, kubeletPods())
				runCases(t, e)
				logVerbs(t, e)
				t.Logf("timing: %s cni-%s total: %s", rt.name, version, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// runCases runs the cases in order on one containerd, then checks that
// nothing of any sandbox is left.
func runCases(t *testing.T, e *env) {
	if e.rt.major == 1 && e.cni.version == "1.1.0" {
		t.Run("ConflistVersionUnsupported", func(t *testing.T) { testOldRuntimeNewConflist(t, e) })
		t.Run("NoLeak", func(t *testing.T) { t.Logf("leaks: %s cni-%s: %d", e.rt.name, e.cni.version, e.expectNoLeak(t)) })
		return
	}
	cases := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"NoRDMAPodPassesThrough", testPlainPod},
		{"RDMAPodOnNodeWithoutRDMA", testRDMAPodFails},
		{"KubeletUnreachable", testKubeletGone},
		{"Sandboxes30", testBatch},
		{"SMCROnUnsupported", testSMCR},
		{"RestartBetweenADDAndDEL", testRestart},
		{"Concurrent8", testConcurrent},
		{"ReconcileThroughCRI", testReconcile},
	}
	if e.rt.major >= 2 && e.cni.version == "1.1.0" {
		cases = append(cases, struct {
			name string
			fn   func(*testing.T, *env)
		}{"StatusUnderContainerd2", testStatus})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			c.fn(t, e)
			t.Logf("timing: %s: %s", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Run("NoLeak", func(t *testing.T) {
		ctx := callCtx(t)
		for _, err := range e.cri.removeAll(ctx) {
			t.Errorf("remove what is left: %v", err)
		}
		t.Logf("leaks: %s cni-%s: %d", e.rt.name, e.cni.version, e.expectNoLeak(t))
	})
}

// testOldRuntimeNewConflist checks that containerd 1.6's CNI library cannot
// read a 1.1.0 result, so no pod starts on a 1.1.0 conflist there: the first
// plugin's ADD fails in the runtime, the chain never reaches rdma-chain, and
// the runtime's DEL leaves nothing behind.
func testOldRuntimeNewConflist(t *testing.T, e *env) {
	const want = `unsupported CNI result version "1.1.0"`
	for _, name := range []string{plainPod, rdmaPod} {
		_, err := e.cri.run(callCtx(t), e.pod(name, nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("RunPodSandbox %s on %s with a 1.1.0 conflist: %v, want an error with %s", name, e.rt.name, err, want)
		}
		t.Logf("%s: containerd's error: %v", name, err)
	}
	if adds := find(e.cni.logLines(t), "verb", "ADD"); len(adds) != 0 {
		t.Errorf("rdma-chain got %d ADDs, want none (ptp fails first)", len(adds))
	}
}

// pod is the sandbox config of the named pod with its annotations.
func (e *env) pod(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return podConfig(name, "uid-"+name, filepath.Join(e.dir, "pods", name), annotations)
}

// testPlainPod checks that a pod kubelet allocated nothing gets ptp's IP; the
// plugin saw its identity and its annotations, recorded nothing, and DEL
// succeeds.
func testPlainPod(t *testing.T, e *env) {
	id, err := e.cri.run(callCtx(t), e.pod(plainPod, map[string]string{config.AnnotationSMCR: "maybe"}))
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	st, err := e.cri.status(callCtx(t), id)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if len(e.podNetns(t)) == 0 || len(e.links(t)) < 2 {
		t.Errorf("while a sandbox runs: pod netns %v, links in containerd's netns %v; the leak check would see nothing", e.podNetns(t), e.links(t))
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

// testRDMAPodFails checks that a pod allocated rdma/hca on a kernel without
// RDMA fails ADD (code 100); containerd's own cleanup DEL succeeds and
// frees the IP.
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

// testKubeletGone checks that with the pod-resources socket gone ADD
// fails (code 11) naming the socket, and nothing stays recorded or
// leased.
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
	if len(hits) != 1 { // Errorf: callers run in goroutines too
		t.Errorf("plugin log: %d failed ADD lines for pod %s/%s, want 1", len(hits), podNamespace, name)
		return ""
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

// logVerbs reports which CNI verbs containerd sent the plugin in total, and
// how many of each per container at most (containerd 1.6 sends DEL twice).
func logVerbs(t *testing.T, e *env) {
	total := map[string]int{}
	perContainer := map[string]map[string]int{}
	for _, l := range e.cni.logLines(t) {
		v := l["verb"]
		if v == "" {
			continue
		}
		total[v]++
		if perContainer[l["container"]] == nil {
			perContainer[l["container"]] = map[string]int{}
		}
		perContainer[l["container"]][v]++
	}
	most := map[string]int{}
	for id, verbs := range perContainer {
		for v, n := range verbs {
			if id != "" && n > most[v] {
				most[v] = n
			}
		}
	}
	t.Logf("verbs: %s cni-%s: %s sent %v in total (GC %d, CHECK %d, STATUS %d); at most per container %v",
		e.rt.name, e.cni.version, e.rt.name, total, total["GC"], total["CHECK"], total["STATUS"], most)
}
