package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// builds are the test programs built for this test binary, by package and
// tags, in one folder TestMain removes.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

func TestMain(m *testing.M) {
	leakcheck.Main(m, func() {
		if builds.dir != "" {
			_ = os.RemoveAll(builds.dir)
		}
	})
}

// testBuild builds the package pkg (relative to the repository) with tags,
// once per test binary, and returns the binary.
func testBuild(t testing.TB, pkg, tags string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	key := pkg + " " + tags
	if bin, ok := builds.bins[key]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "rdma-chain-netns-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = dir, map[string]string{}
	}
	bin := filepath.Join(builds.dir, fmt.Sprintf("%d", len(builds.bins)), filepath.Base(pkg))
	testenv.Build(t, bin, pkg, tags)
	builds.bins[key] = bin
	return bin
}

// failpointPlugin is ./integration/netns/crash_plugin (rdma-chain over a
// fake RDMA subsystem) with the failpoints compiled in.
func failpointPlugin(t *testing.T) string {
	return testBuild(t, "./integration/netns/crash_plugin", "failpoint")
}

// fakeRDMAPlugin is ./integration/netns/crash_plugin built without
// failpoints: rdma-chain whose only replaced part is the RDMA subsystem (a
// file-backed model), so exclusive and shared mode run on this kernel with
// a veth as the RDMA netdev. Tests only; never shipped.
func fakeRDMAPlugin(t testing.TB) string {
	return testBuild(t, "./integration/netns/crash_plugin", "")
}

// crashScenario is one path through the plugin this kernel can run.
type crashScenario struct {
	name  string
	mode  string         // the fake RDMA subsystem's netns mode
	entry map[string]any // extra keys of the rdma-chain entry
	ipam  bool
	// devinfo says that the runtime passes CNIDeviceInfoFile (and the
	// device has a PCI address).
	devinfo bool
	// must lists substrings that some discovered ADD and DEL failpoint
	// must contain.
	must []string
}

var crashScenarios = []crashScenario{
	{name: "shared-macvlan", mode: "shared", entry: map[string]any{"sharedLink": map[string]string{"type": "macvlan"}}, must: []string{"child"}},
	{name: "shared-macvlan-ipam", mode: "shared", entry: map[string]any{"sharedLink": map[string]string{"type": "macvlan"}}, ipam: true, must: []string{"child", "ipam"}},
	{name: "shared-macvlan-smc", mode: "shared", entry: map[string]any{"sharedLink": map[string]string{"type": "macvlan"},
		"smcr":          map[string]string{"onUnsupported": "fail"},
		"runtimeConfig": map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"network.alibabacloud.com/erdma-smcr": "true"}}},
		must: []string{"child", "smc"}},
	{name: "shared-macvlan-devinfo", mode: "shared", entry: map[string]any{"sharedLink": map[string]string{"type": "macvlan"}},
		devinfo: true, must: []string{"child", "device-info"}},
	{name: "exclusive", mode: "exclusive", must: []string{"netdev", "rdma"}},
	{name: "exclusive-ipam", mode: "exclusive", ipam: true, must: []string{"netdev", "rdma", "ipam"}},
}

// crashTally counts runs and leaks over the whole matrix.
type crashTally struct {
	mu                sync.Mutex
	failpoints, runs  int
	leaks             []string
	addPoints, delPts map[string][]string
}

func (c *crashTally) leak(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaks = append(c.leaks, fmt.Sprintf(format, args...))
}

// TestCrashFailpoints checks, for every failpoint a normal run reaches, that
// ADD killed there, then DEL (and, separately, GC), returns the node to its
// exact prior state, and that DEL killed there, then DEL again (or GC), does
// likewise.
func TestCrashFailpoints(t *testing.T) {
	testenv.Privileged(t)
	bin := failpointPlugin(t)
	tally := &crashTally{addPoints: map[string][]string{}, delPts: map[string][]string{}}
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) { runCrashScenario(t, bin, sc, tally) })
	}
	t.Logf("failpoints discovered (distinct per scenario): %d, crash runs: %d, leaks: %d", tally.failpoints, tally.runs, len(tally.leaks))
	for _, sc := range crashScenarios {
		t.Logf("%s: ADD %v; DEL %v", sc.name, tally.addPoints[sc.name], tally.delPts[sc.name])
	}
	for _, l := range tally.leaks {
		t.Logf("leak: %s", l)
	}
}

func runCrashScenario(t *testing.T, bin string, sc crashScenario, tally *crashTally) {
	n := newCrashNode(t, bin, sc)
	addPoints, delPoints := n.discover(sc)
	tally.mu.Lock()
	tally.addPoints[sc.name], tally.delPts[sc.name] = addPoints, delPoints
	tally.failpoints += len(addPoints) + len(delPoints)
	tally.mu.Unlock()
	for _, m := range []struct {
		verb   string
		points []string
		crash  func(*testing.T, string, string) string
	}{{"ADD", addPoints, n.crashAdd}, {"DEL", delPoints, n.crashDel}} {
		for _, fp := range m.points {
			for _, after := range []string{"DEL", "GC"} {
				t.Run(m.verb+"-"+fp+"-then-"+after, func(t *testing.T) {
					tally.mu.Lock()
					tally.runs++
					tally.mu.Unlock()
					if d := m.crash(t, fp, after); d != "" {
						tally.leak("%s: %s killed at %s, then %s:\n%s", sc.name, m.verb, fp, after, d)
						t.Errorf("node differs from before ADD:\n%s", d)
					}
				})
			}
		}
	}
}

// discover runs one normal ADD and DEL with a trace and returns the
// failpoints each reached, in order, without repeats. The normal cycle must
// itself leave the node as it found it.
func (n *crashNode) discover(sc crashScenario) (add, del []string) {
	t := n.t
	t.Helper()
	p := n.newPod("trace")
	before := n.snapshot(p)
	addTrace, delTrace := filepath.Join(n.dir, "add.trace"), filepath.Join(n.dir, "del.trace")
	prev := n.primaryAdd(p)
	if r := n.execPlugin("ADD", p, prev, "RDMA_CHAIN_FAILPOINT_TRACE="+addTrace); r.err != nil {
		t.Fatalf("normal ADD: %s", r)
	}
	if r := n.execPlugin("DEL", p, nil, "RDMA_CHAIN_FAILPOINT_TRACE="+delTrace); r.err != nil {
		t.Fatalf("normal DEL: %s", r)
	}
	if err := n.primaryDel(p); err != nil {
		t.Fatalf("ptp DEL: %v", err)
	}
	// The first use creates the state and IPAM folders and their locks;
	// every later run is compared with everything.
	after := n.snapshot(p)
	after.Files = slices.DeleteFunc(after.Files, func(f string) bool {
		return strings.HasSuffix(f, " d---------") || strings.HasSuffix(f, "/lock ----------")
	})
	if d := before.diff(after); d != "" {
		t.Fatalf("a normal ADD+DEL does not restore the node:\n%s", d)
	}
	add, del = readTrace(t, addTrace), readTrace(t, delTrace)
	t.Logf("ADD failpoints %v; DEL failpoints %v", add, del)
	for _, m := range sc.must {
		if !containsSub(add, m) || !containsSub(del, m) {
			t.Errorf("no failpoint containing %q in ADD %v / DEL %v", m, add, del)
		}
	}
	return add, del
}

func readTrace(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("trace: %v (is the plugin built with -tags failpoint?)", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Fields(string(b)) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("trace %s is empty", path)
	}
	return out
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// crashAdd kills ADD at fp, then runs the runtime's clean-up (after: DEL of
// the whole chain, or rdma-chain's GC followed by the primary's DEL) and
// returns how the node differs from before the ADD.
func (n *crashNode) crashAdd(t *testing.T, fp, after string) string {
	defer n.use(t)()
	p := n.newPod("crash")
	before := n.snapshot(p)
	prev := n.primaryAdd(p)
	mid := n.snapshot(p)
	r := n.execPlugin("ADD", p, prev, "RDMA_CHAIN_FAILPOINT="+fp)
	if !r.killed {
		t.Fatalf("ADD was not killed at %s: %s", fp, r)
	}
	// The failpoint follows a change: the crash left something to undo,
	// which the snapshot sees.
	if mid.diff(n.snapshot(p)) == "" {
		t.Errorf("ADD killed at %s left nothing to undo: is it after a host change?", fp)
	}
	n.cleanUp(t, p, after)
	return before.diff(n.snapshot(p))
}

// cleanUp is the runtime's reaction to a crashed verb: DEL of the whole
// chain, or rdma-chain's GC (nothing valid) followed by the primary's DEL.
func (n *crashNode) cleanUp(t *testing.T, p *crashPod, after string) {
	switch after {
	case "DEL":
		if err := n.fullDel(p); err != nil {
			t.Errorf("DEL after the crash: %v", err)
		}
	case "GC":
		if r := n.execPlugin("GC", p, nil); r.err != nil {
			t.Errorf("GC after the crash: %s", r)
		}
		if err := n.primaryDel(p); err != nil {
			t.Errorf("ptp DEL: %v", err)
		}
	}
}

// crashDel runs a good ADD, kills rdma-chain's DEL at fp, then runs the
// runtime's clean-up: DEL of the whole chain, or rdma-chain's GC followed by
// the primary's DEL.
func (n *crashNode) crashDel(t *testing.T, fp, after string) string {
	defer n.use(t)()
	p := n.newPod("crashdel")
	before := n.snapshot(p)
	prev := n.primaryAdd(p)
	if r := n.execPlugin("ADD", p, prev); r.err != nil {
		t.Fatalf("ADD: %s", r)
	}
	if r := n.execPlugin("DEL", p, nil, "RDMA_CHAIN_FAILPOINT="+fp); !r.killed {
		t.Fatalf("DEL was not killed at %s: %s", fp, r)
	}
	n.cleanUp(t, p, after)
	return before.diff(n.snapshot(p))
}

// use makes the node's helpers report to t (a subtest) until the returned
// function restores the previous test.
func (n *crashNode) use(t *testing.T) func() {
	prev := n.t
	n.t = t
	return func() { n.t = prev }
}
