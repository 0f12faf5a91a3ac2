//go:build containerd

package containerd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// restartPods is how many sandboxes TestContainerdRestartDuringDELs stops
// at once.
const restartPods = 6

// TestContainerdRestartDuringDELs stops and removes, all at once,
// restartPods sandboxes that each got rdma0 (the fake-RDMA build, as in
// TestContainerdPodIPs: shared mode, a macvlan child of a veth standing
// in for mlx5_0's netdev, a host-local lease of fd00:78::/64), and kills
// containerd (SIGKILL) as soon as one of them runs the DEL of a given
// plugin of the chain (each round another: rdma-chain's, then the
// primary's), then starts it again as the tier does. The plugin's DELs it
// left running end as they would have (not of SIGPIPE on their stderr, a
// pipe to the dead runtime), those past reading their configuration with
// exit 0 and their closing line in the plugin's log file; once they have
// ended, no attachment whose DEL the plugin reported done holds a record
// or a lease; kubelet's retry (StopPodSandbox and RemovePodSandbox again
// until they succeed) removes every sandbox left, and then no record,
// lease (rdma0's or the primary's), pod netns pin, mount under the test's
// folders, link (ptp's veth, a child) in containerd's netns or plugin
// process is left.
func TestContainerdRestartDuringDELs(t *testing.T) {
	testenv.RequireRoot(t)
	plugin := filepath.Join(t.TempDir(), "rdma-chain")
	testenv.Build(t, plugin, "./integration/netns/crash_plugin", "")
	for _, rt := range runtimes() {
		version := map[int]string{1: "0.4.0", 2: "1.1.0"}[rt.major]
		t.Run(rt.name+"/"+version, func(t *testing.T) { runRestartDuringDELs(t, rt, version, plugin) })
	}
}

func runRestartDuringDELs(t *testing.T, rt runtimeKind, version, plugin string) {
	fake, rdmaIPAM := t.TempDir(), t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"mode": "shared",
		"devices": []any{map[string]string{"name": "mlx5_0", "netdev": "ens9", "pci": "0000:3b:00.0"}}})
	if err := os.WriteFile(filepath.Join(fake, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	var pods []fakekubelet.Pod
	for i := range restartPods {
		pods = append(pods, fakekubelet.Pod{Namespace: podNamespace, Name: fmt.Sprintf("rdel-%d", i),
			Resources: map[string][]string{"rdma/hca": {"mlx5_0"}}})
	}
	e := newEnvWith(t, rt, version, pods, envOptions{plugin: plugin, daemonEnv: []string{"RDMA_CHAIN_FAKE_RDMA=" + fake},
		rdmaKeys: map[string]any{"sharedLink": map[string]string{"type": "macvlan"},
			"ipam": map[string]any{"type": "host-local", "dataDir": rdmaIPAM,
				"ranges": [][]map[string]string{{{"subnet": "fd00:78::/64"}}}}}})
	netnstest.AddVeth(t, e.netns, netnstest.NewNS(t), "ens9", 1500)
	for _, during := range []string{"rdma-chain", "ptp"} {
		t.Run("during-"+during, func(t *testing.T) { e.restartRound(t, pods, during, rdmaIPAM) })
	}
}

// restartRound runs the pods' sandboxes, stops and removes them all at
// once, kills containerd while one of them runs plugin's DEL, starts it
// again and retries as kubelet does; nothing may be left.
func (e *env) restartRound(t *testing.T, pods []fakekubelet.Pod, plugin, rdmaIPAM string) {
	ids := e.runAll(t, pods)
	if recs := e.cni.attachments(t); len(recs) != restartPods || len(leasesIn(t, rdmaIPAM, "")) != restartPods {
		t.Fatalf("after %d ADDs: records %v, rdma0 leases %v, want %d of each", restartPods, recs, leasesIn(t, rdmaIPAM, ""), restartPods)
	}
	start := time.Now()
	wave := e.removeAtOnce(ids)
	inFlight := e.killOnDEL(t, plugin)
	first := wave()
	t.Logf("containerd killed %v after the sandboxes' stop began, running %v; the first StopPodSandbox and RemovePodSandbox: %v",
		time.Since(start).Round(time.Millisecond), inFlight, first)
	for p, how := range reap(t, inFlight) {
		if how == reapedByRuntime {
			t.Logf("%v ended before the kill; the runtime had its answer", p)
			continue
		}
		if p.plugin == "rdma-chain" && strings.HasPrefix(how, "signal") || p.logging && how != "exit 0" {
			t.Errorf("%v, left running by the runtime's death, ended with %s, want exit 0", p, how)
		} else if p.logging {
			expectLine(t, e.cni.logLines(t), "verb", "DEL", "container", p.container, "msg", "done")
		}
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		left := cniProcs(e.cni.bin, allPIDs())
		return len(left) == 0, fmt.Sprintf("plugins still running after containerd's death: %v", left)
	})
	e.delsDone(t, rdmaIPAM, ids)

	e.d.start(t)
	e.waitReady(t)
	retried := e.retryRemoval(t)
	t.Logf("restart during %s's DEL: %s: %d sandboxes, %d removed before the kill, %d removed by the retry after containerd came back",
		plugin, e.rt.name, restartPods, restartPods-retried, retried)
	e.expectNothingLeft(t, rdmaIPAM)
}

// runAll runs every pod's sandbox at once and returns their IDs; each got
// rdma0 (the plugin's ADD attached it).
func (e *env) runAll(t *testing.T, pods []fakekubelet.Pod) []string {
	ids := make([]string, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			id, err := e.cri.run(callCtx(t), e.pod(p.Name, nil))
			if err != nil {
				t.Errorf("RunPodSandbox %s: %v", p.Name, err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range ids {
		expectLine(t, e.cni.logLines(t), "verb", "ADD", "container", id, "outcome", "ok", "msg", "done")
		expectLine(t, e.cni.logLines(t), "container", id, "msg", "attached")
	}
	return ids
}

// removeAtOnce stops and removes each sandbox, all at once, as kubelet
// does when their pods are deleted together; wait returns, once every
// call has ended, what each sandbox's calls answered.
func (e *env) removeAtOnce(ids []string) (wait func() map[string]string) {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			ctx, cancel := e.callTimeout()
			defer cancel()
			answer := "removed"
			if err := e.cri.stop(ctx, id); err != nil {
				answer = "stop: " + err.Error()
			} else if err := e.cri.remove(ctx, id); err != nil {
				answer = "remove: " + err.Error()
			}
			mu.Lock()
			got[id[:12]] = answer
			mu.Unlock()
		})
	}
	return func() map[string]string { wg.Wait(); return got }
}

// killOnDEL kills containerd (SIGKILL) as soon as one of the plugins it
// runs is plugin's DEL (rdma-chain's once it has read its configuration:
// it holds its log file open), and returns the plugins it was running
// then. That DEL is held stopped (SIGSTOP) across the kill, so the
// runtime cannot reap it first: it is certain to outlive the runtime.
func (e *env) killOnDEL(t *testing.T, plugin string) []cniProc {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		running := cniProcs(e.cni.bin, childPIDs(e.d.cmd.Process.Pid))
		for i, p := range running {
			running[i].logging = p.plugin == "rdma-chain" && holdsFile(p.pid, e.cni.log)
		}
		i := slices.IndexFunc(running, func(p cniProc) bool {
			return p.plugin == plugin && p.verb == "DEL" && (p.logging || plugin != "rdma-chain")
		})
		if i >= 0 && holdStopped(running[i].pid) {
			e.d.kill(t)
			if err := syscall.Kill(running[i].pid, syscall.SIGCONT); err != nil {
				t.Fatalf("resume %v: %v", running[i], err)
			}
			running[i].held = true
			return running
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no DEL of %s ran within 60 s of the sandboxes' stop", plugin)
	return nil
}

// holdStopped stops pid (SIGSTOP) and reports whether it is stopped
// rather than already ended (a zombie, or gone).
func holdStopped(pid int) bool {
	if syscall.Kill(pid, syscall.SIGSTOP) != nil {
		return false
	}
	for {
		switch procState(pid) {
		case 'T', 't':
			return true
		case 'Z', 'X', 0:
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// delsDone checks that no attachment whose DEL the plugin reported done
// (msg=done, outcome ok) is still recorded or holds rdma0's lease.
// Nothing has run since containerd died and its plugins ended.
func (e *env) delsDone(t *testing.T, rdmaIPAM string, ids []string) {
	t.Helper()
	recs, err := state.New(e.cni.state).List()
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, l := range find(e.cni.logLines(t), "verb", "DEL", "msg", "done", "outcome", "ok") {
		id := l["container"]
		if !slices.Contains(ids, id) {
			continue // an earlier round's
		}
		done++
		if slices.ContainsFunc(recs, func(r *state.Record) bool { return r.ContainerID == id }) {
			t.Errorf("the plugin's DEL of %s said done, and its record is still there", id)
		}
		if held := leasesIn(t, rdmaIPAM, id); len(held) != 0 {
			t.Errorf("the plugin's DEL of %s said done, and rdma0's lease %v is still held", id, held)
		}
	}
	t.Logf("before the restart: %d DELs of the plugin done, %d attachments still recorded", done, len(recs))
}

// retryRemoval is kubelet's retry after the restart: StopPodSandbox and
// RemovePodSandbox of every sandbox containerd still lists, again until
// none is left. It returns how many sandboxes were left to retry.
func (e *env) retryRemoval(t *testing.T) int {
	t.Helper()
	seen := map[string]bool{}
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		ctx, cancel := e.callTimeout()
		defer cancel()
		left, err := e.cri.list(ctx)
		if err != nil {
			return false, "ListPodSandbox: " + err.Error()
		}
		var errs []string
		for _, id := range left {
			seen[id] = true
			if err := e.cri.stop(ctx, id); err != nil {
				errs = append(errs, fmt.Sprintf("stop %s: %v", id[:12], err))
			} else if err := e.cri.remove(ctx, id); err != nil {
				errs = append(errs, fmt.Sprintf("remove %s: %v", id[:12], err))
			}
		}
		return len(left) == 0, fmt.Sprintf("sandboxes left %d: %v", len(left), errs)
	})
	return len(seen)
}

// expectNothingLeft fails t for every record, lease (rdma0's and the
// primary's), pod netns pin, mount under the env's folder, link in
// containerd's netns but lo and ens9, and plugin process left.
func (e *env) expectNothingLeft(t *testing.T, rdmaIPAM string) {
	t.Helper()
	checks := map[string][]string{
		"records":             e.cni.attachments(t),
		"rdma0 leases":        leasesIn(t, rdmaIPAM, ""),
		"primary leases":      e.cni.leases(t, ""),
		"pod netns pins":      e.podNetns(t),
		"mounts":              mountsUnder(t, e.dir),
		"links in containerd": slices.DeleteFunc(e.links(t), func(l string) bool { return l == "lo" || l == "ens9" }),
	}
	for what, left := range checks {
		if len(left) != 0 {
			t.Errorf("%s left: %v", what, left)
		}
	}
	if left := cniProcs(e.cni.bin, allPIDs()); len(left) != 0 {
		t.Errorf("plugins still running: %v", left)
	}
	e.lostShims(t)
}

// lostShims deals with the shims containerd 1.6 can lose when it is killed
// while it stops a sandbox: such a shim outlives the sandbox's removal with
// its pause process. That is the runtime's leak, not the plugin's: the pause
// keeps its netns alive, which must hold no rdma0; the shim and its pause are
// then logged and killed by their PIDs, so that the daemon's stop, which fails
// on a shim left in any other case, does not.
func (e *env) lostShims(t *testing.T) {
	t.Helper()
	var shims []int
	deadline := time.Now().Add(10 * time.Second)
	for shims = shimPIDs(e.d.socket); len(shims) != 0 && time.Now().Before(deadline); shims = shimPIDs(e.d.socket) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, shim := range shims {
		for _, pause := range childPIDs(shim) {
			if n, err := ns.GetNS(fmt.Sprintf("/proc/%d/ns/net", pause)); err == nil {
				if names := netnstest.Names(t, n); slices.Contains(names, "rdma0") {
					t.Errorf("the netns of pause %d, kept by the runtime's lost shim %d, holds %v", pause, shim, names)
				}
				n.Close()
			}
			_ = syscall.Kill(pause, syscall.SIGKILL)
		}
		t.Logf("containerd %s lost the shim pid %d of a removed sandbox: killing it", e.rt.name, shim)
		_ = syscall.Kill(shim, syscall.SIGKILL)
	}
}
