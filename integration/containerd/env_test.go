//go:build containerd

// Package containerd is the containerd tier: a real containerd 1.6 with runc
// creates pod sandboxes through the CRI API and invokes the real chain
// [ptp + host-local, loopback, rdma-chain] for them. It proves what only a
// real runtime shows: CNI_ARGS K8S_POD_* and the pod annotations in
// runtimeConfig["io.kubernetes.cri.pod-annotations"] reach the plugin, and
// the runtime's ADD/DEL work with it, including its cleanup of a failed ADD.
package containerd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testenv"
)

// env is one running containerd with its CNI folders and fake kubelet.
type env struct {
	dir     string
	cni     cniDirs
	cri     *cri
	kubelet *fakekubelet.Server
	pods    []fakekubelet.Pod
}

// newEnv starts everything the cases share; cleanup removes every sandbox
// left, then stops containerd by its PID and the fake kubelet.
func newEnv(t *testing.T, pods []fakekubelet.Pod) *env {
	t.Helper()
	testenv.RequireRoot(t)
	containerdBin := testenv.RequireBinary(t, "containerd")
	testenv.RequireBinary(t, "runc")
	testenv.RequireBinary(t, "containerd-shim-runc-v2")
	ctr := testenv.RequireBinary(t, "ctr")
	e := &env{dir: t.TempDir(), pods: pods}
	e.cni = setupCNI(t, e.dir)
	e.startKubelet(t)

	start := time.Now()
	d := startContainerd(t, containerdBin, filepath.Join(e.dir, "containerd"), e.cni.bin, e.cni.conf)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if e.cri, err = dialCRI(d.socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cleanup(t) })
	if err := e.cri.waitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, d.tail())
	}
	t.Logf("timing: containerd start to CRI ready: %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	importPause(t, ctr, d.socket, e.dir)
	t.Logf("timing: pause image build + import: %s", time.Since(start).Round(time.Millisecond))
	return e
}

// startKubelet serves the pod-resources API on the conflist's socket.
func (e *env) startKubelet(t *testing.T) {
	t.Helper()
	s, err := fakekubelet.Start(e.cni.socket, e.pods)
	if err != nil {
		t.Fatal(err)
	}
	e.kubelet = s
}

// stopKubelet stops the fake kubelet and removes its socket.
func (e *env) stopKubelet(t *testing.T) {
	t.Helper()
	if e.kubelet != nil {
		e.kubelet.Stop()
		e.kubelet = nil
	}
	if err := os.Remove(e.cni.socket); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// cleanup runs before containerd stops (cleanups run last-in first-out).
func (e *env) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, err := range e.cri.removeAll(ctx) {
		t.Errorf("cleanup: %v", err)
	}
	_ = e.cri.conn.Close()
	e.stopKubelet(t)
	if t.Failed() {
		b, _ := os.ReadFile(e.cni.log)
		t.Logf("rdma-chain log:\n%s", b)
	}
}

// ctx is a per-call deadline for CRI calls.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
