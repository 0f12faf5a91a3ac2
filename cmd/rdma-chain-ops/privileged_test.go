package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/inspect"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// podWithChild creates a pod netns holding a macvlan child "rdma0" of the
// node netns's stand-in RDMA netdev, as shared-mode ADD leaves it, and
// records the attachment.
func podWithChild(t *testing.T, node ns.NetNS, dir, cid string, age time.Duration) ns.NetNS {
	t.Helper()
	pod := netnstest.NewNS(t)
	var child netdev.Child
	err := node.Do(func(ns.NetNS) (err error) {
		child, err = netdev.AddChild(netdev.ChildSpec{Kind: "macvlan", Mode: "bridge", Parent: "rdmaeth", PodName: "rdma0"}, pod)
		return err
	})
	if err != nil {
		t.Fatalf("macvlan child: %v", err)
	}
	netnstest.AddAddr(t, pod, "rdma0", "fd00:77::"+cid[len(cid)-1:]+"/64")
	r := &state.Record{Network: "rdmanet", ContainerID: cid, IfName: "eth0", NetNS: pod.Path(), Mode: rdma.ModeShared,
		Pod: state.Pod{Namespace: "default", Name: "pod-" + cid}, CreatedAt: time.Now().Add(-age).UTC(),
		Links: []state.Link{{Device: "rxe0", Kind: state.LinkMACVlan, Step: state.StepDone, IPs: []string{"fd00:77::" + cid[len(cid)-1:] + "/64"},
			HostLink: state.HostLink{HostName: "rdmaeth", PodName: "rdma0", MAC: child.MAC}}}}
	if err := state.New(dir).Put(r); err != nil {
		t.Fatal(err)
	}
	return pod
}

func newNodeNS(t *testing.T) ns.NetNS {
	testenv.Privileged(t)
	node := netnstest.NewNS(t)
	peer := netnstest.NewNS(t)
	netnstest.AddVeth(t, node, peer, "rdmaeth", 1500)
	return node
}

func hasLink(t *testing.T, n ns.NetNS, name string) bool {
	return slices.Contains(netnstest.Names(t, n), name)
}

// serveCRI serves ListPodSandbox with the given sandbox IDs, all ready.
func serveCRI(t *testing.T, ids ...string) string {
	states := map[string]runtimeapi.PodSandboxState{}
	for _, id := range ids {
		states[id] = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return serveCRIStates(t, states)
}

// serveCRIStates serves ListPodSandbox with the given sandboxes, by ID.
func serveCRIStates(t *testing.T, states map[string]runtimeapi.PodSandboxState) string {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &criServer{}
	for id, st := range states {
		f.items = append(f.items, &runtimeapi.PodSandbox{Id: id, State: st, Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + id, Namespace: "default"}})
	}
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sock
}

type criServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	items []*runtimeapi.PodSandbox
}

func (c *criServer) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: c.items}, nil
}

// reconcileIn runs the reconcile command with the node netns as the host.
func reconcileIn(t *testing.T, node ns.NetNS, args ...string) (int, string) {
	var code int
	var out, errOut string
	err := node.Do(func(ns.NetNS) error {
		code, out, errOut = run(append([]string{"reconcile"}, args...)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reconcile %v: code %d\n%s%s", args, code, out, errOut)
	return code, out
}

// TestReconcileNetnsGone checks that, without CRI, the attachment whose
// netns was deleted is released through the plugin's real DEL; the live
// one and its child are untouched.
func TestReconcileNetnsGone(t *testing.T) {
	testenv.Privileged(t)
	node := newNodeNS(t)
	dir := t.TempDir()
	live := podWithChild(t, node, dir, "live1", time.Hour)
	dead := podWithChild(t, node, dir, "dead2", time.Hour)
	netnstest.Delete(dead)
	code, out := reconcileIn(t, node, "--net-name", "rdmanet", "--data-dir", dir, "--once")
	if code != ExitOK || !strings.Contains(out, `msg="released an attachment" attachment="rdmanet/dead2/eth0 (pod default/pod-dead2, shared, macvlan rxe0 as rdma0)" why="netns `+dead.Path()+` is gone"`) {
		t.Fatalf("code %d\n%s", code, out)
	}
	recs, err := state.New(dir).List()
	if err != nil || len(recs) != 1 || recs[0].ContainerID != "live1" {
		t.Errorf("records left %v %v", recs, err)
	}
	if !hasLink(t, live, "rdma0") {
		t.Error("the live pod lost its child")
	}
}

// TestReconcileCRIGone checks that, with CRI, an attachment whose sandbox
// the runtime no longer lists is released although its netns lives: its
// child is deleted in that netns. A listed one and a young one are kept.
func TestReconcileCRIGone(t *testing.T) {
	testenv.Privileged(t)
	node := newNodeNS(t)
	dir := t.TempDir()
	listed := podWithChild(t, node, dir, "listed1", time.Hour)
	gone := podWithChild(t, node, dir, "gone2", time.Hour)
	young := podWithChild(t, node, dir, "young3", time.Second)
	sock := serveCRI(t, "listed1", "other")
	code, out := reconcileIn(t, node, "--net-name", "rdmanet", "--data-dir", dir, "--cri-socket", sock, "--once")
	if code != ExitOK || !strings.Contains(out, `msg="released an attachment" attachment="rdmanet/gone2/eth0`) || !strings.Contains(out, `msg="pass done" released=1 kept=2 problems=0`) {
		t.Fatalf("code %d\n%s", code, out)
	}
	if hasLink(t, gone, "rdma0") {
		t.Error("the gone sandbox's child is still in its netns")
	}
	if !hasLink(t, listed, "rdma0") || !hasLink(t, young, "rdma0") {
		t.Error("a kept pod lost its child")
	}
}

// TestReconcileCRINotReady checks that, with CRI, a listed sandbox whose
// netns pin was deleted is released through the plugin's real DEL when the
// runtime says it is not ready; a ready one is kept, a problem, as is its
// lease; a not ready one whose netns lives is kept with its child.
func TestReconcileCRINotReady(t *testing.T) {
	testenv.Privileged(t)
	node := newNodeNS(t)
	dir := t.TempDir()
	netnstest.Delete(podWithChild(t, node, dir, "ready1", time.Hour))
	netnstest.Delete(podWithChild(t, node, dir, "dead2", time.Hour))
	restarting := podWithChild(t, node, dir, "restarting3", time.Hour)
	sock := serveCRIStates(t, map[string]runtimeapi.PodSandboxState{
		"ready1":      runtimeapi.PodSandboxState_SANDBOX_READY,
		"dead2":       runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		"restarting3": runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
	})
	code, out := reconcileIn(t, node, "--net-name", "rdmanet", "--data-dir", dir, "--cri-socket", sock, "--once")
	if code != ExitProblems ||
		!strings.Contains(out, `msg="released an attachment" attachment="rdmanet/dead2/eth0 (pod default/pod-dead2, shared, macvlan rxe0 as rdma0)" why="netns `) ||
		!strings.Contains(out, `is gone while CRI still lists the sandbox, not ready"`) ||
		!strings.Contains(out, `attachment="rdmanet/ready1/eth0 (pod default/pod-ready1, shared, macvlan rxe0 as rdma0)"`) ||
		!strings.Contains(out, `msg="pass done" released=1 kept=2 problems=1`) {
		t.Fatalf("code %d\n%s", code, out)
	}
	recs, err := state.New(dir).List()
	ids := []string{}
	for _, r := range recs {
		ids = append(ids, r.ContainerID)
	}
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"ready1", "restarting3"}) {
		t.Errorf("records left %v %v", ids, err)
	}
	if !hasLink(t, restarting, "rdma0") {
		t.Error("the not-ready sandbox whose netns lives lost its child")
	}
}

// TestInspectRealNetns checks that inspect reads a real pod netns and
// judges the recorded child healthy, then missing once it is deleted
// behind its back.
func TestInspectRealNetns(t *testing.T) {
	testenv.Privileged(t)
	node := newNodeNS(t)
	dir := t.TempDir()
	pod := podWithChild(t, node, dir, "pod1", time.Hour)
	r, err := inspect.Run(inspect.Options{Netns: pod.Path(), DataDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Attachments) != 1 || !r.Attachments[0].Healthy {
		t.Fatalf("attachments %+v", r.Attachments)
	}
	if r.Netns == nil || !slices.ContainsFunc(r.Netns.Interfaces, func(i inspect.Iface) bool {
		return i.Name == "rdma0" && i.Kind == "macvlan" && i.RDMA && slices.Contains(i.Addrs, "fd00:77::1/64")
	}) {
		t.Fatalf("netns %+v", r.Netns)
	}
	err = pod.Do(func(ns.NetNS) error { return netdev.DelChild(pod.Path(), "rdma0", "") })
	if err != nil {
		t.Fatal(err)
	}
	if r, err = inspect.Run(inspect.Options{DataDirs: []string{dir}}); err != nil {
		t.Fatal(err)
	}
	if r.Attachments[0].Healthy || !slices.Contains(r.Attachments[0].Problems, "interface rdma0 is missing from the pod netns") {
		t.Errorf("after deleting the child: %+v", r.Attachments[0])
	}
}

// lineSignal is an io.Writer that keeps what is written and closes seen
// once a write contains want.
type lineSignal struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (l *lineSignal) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if strings.Contains(string(p), l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}

func (l *lineSignal) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestUninstallLiveAttachment checks that uninstall never strands a live
// pod's attachment. With a pod holding a macvlan child on the real kernel,
// it drains the entry and keeps the entry and the binaries (the child
// stays); with --wait it waits until the pod's netns is gone, releases the
// attachment through the plugin's DEL, and only then takes the entry and
// the binaries out.
func TestUninstallLiveAttachment(t *testing.T) {
	testenv.Privileged(t)
	node := newNodeNS(t)
	dir := t.TempDir()
	pod := podWithChild(t, node, dir, "live1", time.Hour)
	src, bin := newBinTree(t)
	if code, out, errOut := run("install", "--binaries-from", src, "--cni-bin-dir", bin); code != ExitOK {
		t.Fatalf("install: %d %s%s", code, out, errOut)
	}
	confDir := t.TempDir()
	primary := filepath.Join(confDir, "10-ptp.conflist")
	orig := `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"}]}`
	withEntry := `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"shared","sharedLink":{"type":"macvlan"},"dataDir":"` + dir + `"}]}`
	if err := os.WriteFile(primary, []byte(withEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"uninstall", "--cni-conf-dir", confDir, "--conflist", "auto", "--cni-bin-dir", bin}
	var code int
	var out, errOut string
	_ = node.Do(func(ns.NetNS) error { code, out, errOut = run(args...); return nil })
	if code != ExitProblems || !strings.Contains(out, "held by rdmanet/live1/eth0, pod default/pod-live1, netns "+pod.Path()) ||
		!strings.Contains(errOut, "attachments of running pods are still recorded") {
		t.Fatalf("uninstall with a live pod: %d\n%s%s", code, out, errOut)
	}
	if data, _ := os.ReadFile(primary); !strings.Contains(string(data), `"drain": true`) {
		t.Errorf("entry not draining:\n%s", data)
	}
	if _, err := os.Stat(filepath.Join(bin, "rdma-chain")); err != nil || !hasLink(t, pod, "rdma0") {
		t.Fatalf("binary or the pod's child gone while the pod lives: %v", err)
	}

	stdout := &lineSignal{want: "1 attachments recorded: waiting", seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		var c int
		_ = node.Do(func(ns.NetNS) error {
			c = Main(append(args, "--wait", "2m"), "test", IO{Stdout: stdout, Stderr: stdout})
			return nil
		})
		done <- c
	}()
	select {
	case <-stdout.seen: // it looked once and is waiting
	case c := <-done:
		t.Fatalf("uninstall --wait returned %d before the pod went:\n%s", c, stdout)
	}
	netnstest.Delete(pod)
	if c := <-done; c != ExitOK {
		t.Fatalf("uninstall --wait: %d\n%s", c, stdout)
	}
	t.Logf("uninstall --wait:\n%s", stdout)
	for _, want := range []string{`msg="released an attachment" attachment="rdmanet/live1/eth0`, primary + ": rdma-chain entry removed", bin + "/rdma-chain: removed"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("uninstall --wait output lacks %q:\n%s", want, stdout)
		}
	}
	if data, _ := os.ReadFile(primary); string(data) != orig {
		t.Errorf("conflist after uninstall:\n%s\nwant\n%s", data, orig)
	}
	if recs, err := state.New(dir).List(); err != nil || len(recs) != 0 {
		t.Errorf("records left: %v %v", recs, err)
	}
}
