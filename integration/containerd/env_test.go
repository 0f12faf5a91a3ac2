//go:build containerd

// Package containerd is the containerd tier: real containerd runtimes
// (Debian's 1.6 and v2.4.2 built by scripts/containerd-deps.sh) with runc
// create pod sandboxes through the CRI API and invoke the real chain
// [ptp + host-local, loopback, rdma-chain] for them, at cniVersion 0.4.0 (as
// Terway writes) and 1.1.0. It proves what only a real runtime shows: CNI_ARGS
// K8S_POD_* and the pod annotations in
// runtimeConfig["io.kubernetes.cri.pod-annotations"] reach the plugin, the
// runtime's ADD/DEL work with it (its cleanup of a failed ADD, a restart
// between ADD and DEL, a kill while DELs run, concurrent sandboxes)
// without leaks, and which verbs
// (STATUS, GC, CHECK) each runtime actually sends.
package containerd

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// runtimeKind is one containerd build: its binaries' folder and major version.
type runtimeKind struct {
	name   string
	binDir string
	major  int
}

// runtimes are the containerd builds the tier runs on: Debian's 1.6 and
// v2.4.2 from .tools/containerd2.
func runtimes() []runtimeKind {
	return []runtimeKind{
		{name: "containerd-1.6", binDir: "/usr/bin", major: 1},
		{name: "containerd-2.4", binDir: testenv.ToolsDir("containerd2"), major: 2},
	}
}

// require stops t unless rt's binaries are all in its folder (no PATH
// fallback: 2.x must not silently run Debian's 1.6) and returns its
// `containerd --version` line.
func (rt runtimeKind) require(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if st, err := os.Stat(filepath.Join(rt.binDir, b)); err != nil || st.IsDir() {
			testenv.Unavailable(t, "%s: %s/%s missing (run ./scripts/containerd-deps.sh)", rt.name, rt.binDir, b)
		}
	}
	testenv.RequireBinary(t, "runc")
	testenv.RequireBinary(t, "nsenter")
	out, err := exec.Command(filepath.Join(rt.binDir, "containerd"), "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", rt.name, err)
	}
	version := strings.TrimSpace(string(out))
	want := map[int]string{1: " 1.6.", 2: " 2.4.2"}[rt.major]
	if !strings.Contains(version+" ", want) {
		t.Fatalf("%s: containerd --version says %q, want %q in it", rt.name, version, want)
	}
	return version
}

// env is one running containerd with its CNI folders and fake kubelet.
type env struct {
	rt      runtimeKind
	dir     string
	netns   ns.NetNS
	cni     cniDirs
	cri     *cri
	d       *daemon
	kubelet *fakekubelet.Server
	pods    []fakekubelet.Pod
}

// envOptions changes what an env runs: another rdma-chain build, more keys
// of its entry, more environment for containerd (its plugins inherit it).
type envOptions struct {
	plugin    string
	rdmaKeys  map[string]any
	daemonEnv []string
}

// newEnv starts everything the cases share; cleanup removes every sandbox
// left, then stops containerd by its PID and the fake kubelet.
func newEnv(t *testing.T, rt runtimeKind, cniVersion string, pods []fakekubelet.Pod) *env {
	return newEnvWith(t, rt, cniVersion, pods, envOptions{})
}

// newEnvWith is newEnv with opts.
func newEnvWith(t *testing.T, rt runtimeKind, cniVersion string, pods []fakekubelet.Pod, opts envOptions) *env {
	t.Helper()
	testenv.RequireRoot(t)
	t.Logf("runtime: %s", rt.require(t))
	e := &env{rt: rt, dir: t.TempDir(), pods: pods}
	e.cni = setupCNI(t, e.dir, cniVersion, opts)
	e.startKubelet(t)
	e.netns = netnstest.NewNS(t)

	start := time.Now()
	e.d = startContainerd(t, rt, filepath.Join(e.dir, "containerd"), e.netns.Path(), e.cni.bin, e.cni.conf, opts.daemonEnv...)
	var err error
	if e.cri, err = dialCRI(e.d.socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cleanup(t) })
	e.waitReady(t)
	t.Logf("timing: containerd start to CRI ready: %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	importPause(t, filepath.Join(rt.binDir, "ctr"), e.d.socket, e.dir)
	t.Logf("timing: pause image import: %s", time.Since(start).Round(time.Millisecond))
	return e
}

// waitReady waits until CRI reports the runtime and the network ready.
func (e *env) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.cri.waitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, e.d.tail())
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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

// expectNoLeak fails t if anything of a removed sandbox is left: plugin
// records, host-local leases, containerd's pod netns, links in containerd's
// netns other than lo. It returns how many leaks it found.
func (e *env) expectNoLeak(t *testing.T) int {
	t.Helper()
	leaks := 0
	if recs := e.cni.attachments(t); len(recs) != 0 {
		t.Errorf("state records %v, want none", recs)
		leaks += len(recs)
	}
	if held := e.cni.leases(t, ""); len(held) != 0 {
		t.Errorf("host-local leases %v, want none", held)
		leaks += len(held)
	}
	for _, p := range e.podNetns(t) {
		t.Errorf("pod netns %s left behind", p)
		leaks++
	}
	for _, l := range e.links(t) {
		if l != "lo" {
			t.Errorf("link %s left in containerd's netns", l)
			leaks++
		}
	}
	return leaks
}

// links lists the links in containerd's netns.
func (e *env) links(t *testing.T) []string {
	t.Helper()
	var names []string
	err := e.netns.Do(func(ns.NetNS) error {
		ls, err := nldump.LinkList(nil)
		for _, l := range ls {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	if err != nil {
		t.Fatalf("list links in containerd's netns: %v", err)
	}
	return names
}

// podNetns lists the pod netns mounts under containerd's state dir (in a
// folder "netns" of the CRI plugin's state).
func (e *env) podNetns(t *testing.T) []string {
	t.Helper()
	var found []string
	root := filepath.Join(e.d.dir, "run")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(p, root), "/") > 2 {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Base(filepath.Dir(p)) == "netns" {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("look for pod netns under %s: %v", root, err)
	}
	return found
}

// callCtx is a per-call deadline for CRI calls.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
