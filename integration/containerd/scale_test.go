//go:build containerd

package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

const (
	batchSize   = 30 // sandboxes of testBatch, half allocated rdma/hca
	concurrency = 8  // sandboxes of testConcurrent, created at once
)

// noRDMAMessage is the plugin's message for code 100; the runtime's error
// must carry it to kubelet.
const noRDMAMessage = "pod needs RDMA but this node's kernel has no RDMA subsystem"

// expectNoRDMA checks that the RunPodSandbox error of an RDMA pod carries the
// plugin's code-100 message, that the plugin logged that code, and that the
// runtime's cleanup DEL for the failed sandbox succeeded.
func expectNoRDMA(t *testing.T, e *env, name string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), noRDMAMessage) {
		t.Errorf("RunPodSandbox %s: %v, want an error carrying %q", name, err, noRDMAMessage)
		return
	}
	id := failedAdd(t, e, name)
	lines := e.cni.logLines(t)
	expectLine(t, lines, "verb", "ADD", "container", id, "outcome", "error", "code", "100")
	expectLine(t, lines, "verb", "DEL", "container", id, "outcome", "ok")
}

// runRemove creates a pass-through sandbox, checks the plugin's ADD, then
// stops and removes it and checks the plugin's DEL.
func runRemove(t *testing.T, e *env, name string, annotations map[string]string) {
	t.Helper()
	id, err := e.cri.run(callCtx(t), e.pod(name, annotations))
	if err != nil {
		t.Errorf("RunPodSandbox %s: %v", name, err)
		return
	}
	expectLine(t, e.cni.logLines(t), "verb", "ADD", "container", id, "outcome", "ok")
	if err := e.cri.stop(callCtx(t), id); err != nil {
		t.Errorf("StopPodSandbox %s: %v", name, err)
	}
	if err := e.cri.remove(callCtx(t), id); err != nil {
		t.Errorf("RemovePodSandbox %s: %v", name, err)
	}
	expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
}

// testBatch runs 30 sandboxes one after the other; the 15 allocated rdma/hca
// get code 100 and are cleaned up by the runtime, the other 15 pass through
// and are removed. Nothing stays recorded or leased.
func testBatch(t *testing.T, e *env) {
	var ids []string
	refused := 0
	for i := 0; i < batchSize; i++ {
		name, rdma := batchPod("batch", i)
		id, err := e.cri.run(callCtx(t), e.pod(name, nil))
		if rdma {
			expectNoRDMA(t, e, name, err)
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v", name, err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if err := e.cri.stop(callCtx(t), id); err != nil {
			t.Errorf("StopPodSandbox %s: %v", id, err)
		}
		if err := e.cri.remove(callCtx(t), id); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", id, err)
		}
		expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
	}
	expectNoRecord(t, e)
	if held := e.cni.leases(t, ""); len(held) != 0 {
		t.Errorf("host-local leases %v after the batch, want none", held)
	}
	t.Logf("sandboxes: %s cni-%s: %d created and removed, %d refused with code 100 and cleaned up by the runtime",
		e.rt.name, e.cni.version, len(ids), refused)
}

// testSMCR checks that SMC-R is set up only for a pod that got an RDMA
// device, which no pod gets on this kernel (no RDMA): with
// smcr.onUnsupported "warn" and with "fail" an annotated pod that asked for
// no RDMA starts (pass-through), and an annotated pod allocated rdma/hca
// does not start, the runtime's error carrying the plugin's code-100
// message. (Code 108 for "fail" with SMC missing needs an RDMA device: the
// VM tier's business.)
func testSMCR(t *testing.T, e *env) {
	ann := map[string]string{config.AnnotationSMCR: "true"}
	for i, mode := range []string{"warn", "fail"} {
		if mode == "fail" {
			e.reloadConflist(t, "fail")
			t.Cleanup(func() { e.reloadConflist(t, "warn") })
		}
		plain, _ := batchPod("smcr", 2*i)
		runRemove(t, e, plain, ann)
		rdma, _ := batchPod("smcr", 2*i+1)
		_, err := e.cri.run(callCtx(t), e.pod(rdma, ann))
		expectNoRDMA(t, e, rdma, err)
		if err != nil {
			t.Logf("onUnsupported %s: %s started; %s: containerd's error: %v", mode, plain, rdma, err)
		}
	}
	expectNoRecord(t, e)
}

// reloadConflist rewrites the conflist with onUnsupported and waits until
// containerd has loaded it.
func (e *env) reloadConflist(t *testing.T, onUnsupported string) {
	t.Helper()
	e.cni.writeConflist(t, onUnsupported)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.cri.waitCNIConfig(ctx, `"onUnsupported": "`+onUnsupported+`"`); err != nil {
		t.Fatal(err)
	}
}

// testRestart stops containerd by its PID and starts it again between a
// sandbox's ADD and its DEL, and checks that the DEL (StopPodSandbox after
// the restart) still succeeds and frees the lease.
func testRestart(t *testing.T, e *env) {
	name, _ := batchPod("restart", 0)
	id, err := e.cri.run(callCtx(t), e.pod(name, map[string]string{config.AnnotationSMCR: "true"}))
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if held := e.cni.leases(t, id); len(held) != 1 {
		t.Fatalf("host-local leases %v for %s after ADD, want one", held, id)
	}
	start := time.Now()
	e.d.restart(t)
	e.waitReady(t)
	t.Logf("timing: containerd restart to CRI ready: %s", time.Since(start).Round(time.Millisecond))
	if err := e.cri.stop(callCtx(t), id); err != nil {
		t.Fatalf("StopPodSandbox after the restart: %v", err)
	}
	if err := e.cri.remove(callCtx(t), id); err != nil {
		t.Fatalf("RemovePodSandbox after the restart: %v", err)
	}
	expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", id, "outcome", "ok")
	expectNoLease(t, e, id)
	expectNoRecord(t, e)
}

// testConcurrent creates and removes 8 sandboxes at once (half refused
// with code 100) and checks that all finish within a bound (no deadlock
// between the plugin's node lock, host-local's lock and the runtime),
// nothing leaks.
func testConcurrent(t *testing.T, e *env) {
	var wg sync.WaitGroup
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name, rdma := batchPod("conc", i)
			if !rdma {
				runRemove(t, e, name, nil)
				return
			}
			_, err := e.cri.run(callCtx(t), e.pod(name, nil))
			expectNoRDMA(t, e, name, err)
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatalf("%d concurrent sandboxes not done after 120s: deadlock?", concurrency)
	}
	expectNoRecord(t, e)
	if held := e.cni.leases(t, ""); len(held) != 0 {
		t.Errorf("host-local leases %v after the concurrent sandboxes, want none", held)
		e.explainLeases(t, held)
	}
}

// explainLeases logs who holds each lease and what the plugin saw of it.
func (e *env) explainLeases(t *testing.T, held []string) {
	t.Helper()
	for _, ip := range held {
		b, _ := os.ReadFile(filepath.Join(e.cni.ipam, netName, ip))
		id := strings.Fields(string(b))
		t.Logf("lease %s: %q", ip, b)
		if len(id) > 0 {
			for _, l := range find(e.cni.logLines(t), "container", id[0]) {
				t.Logf("  plugin: %v", l)
			}
		}
	}
}
