package netns

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// callBound is the longest any one call may take: beyond it, a deadlock.
const callBound = 30 * time.Second

// concurrencyRun is one contention run: workers x pods, shared mode with a
// macvlan child and host-local IPAM per pod, one dataDir.
type concurrencyRun struct {
	workers, pods int
	corrupt       bool // a goroutine damages records underneath
}

// TestConcurrency has 16 workers drive ADD/CHECK/STATUS/GC/DEL of their
// pods through the plugin binary (production code over the fake RDMA
// subsystem) on one node, abandoning some pods without DEL for GC to reap,
// and checks that every call answers within the bound, success or one
// proper CNI error, never a panic; at the end a GC leaves no records, no
// temp files and no leases.
func TestConcurrency(t *testing.T) {
	testenv.Privileged(t)
	bin := concurrencyPlugin(t)
	for _, run := range []struct {
		name string
		r    concurrencyRun
	}{
		{"clean", concurrencyRun{workers: 16, pods: podsPerWorker(7)}},
		{"corrupted", concurrencyRun{workers: 16, pods: podsPerWorker(4), corrupt: true}},
	} {
		t.Run(run.name, func(t *testing.T) { run.r.run(t, bin) })
	}
}

// concurrencyPlugin is the crash-test plugin without failpoints.
func concurrencyPlugin(t *testing.T) string {
	t.Helper()
	return failpointPlugin(t) // failpoints only act with RDMA_CHAIN_FAILPOINT set
}

// callStats counts the calls of a run.
type callStats struct {
	mu       sync.Mutex
	calls    map[string]int
	errors   map[string]int // verb/code
	messages map[string]int // verb/code msg
	bad      []string       // panics, improper answers, calls over the bound
	slowest  time.Duration
	// childrenLeft counts the pods whose child DEL could not remove
	// (damaged record).
	childrenLeft int
	durTotal     time.Duration
}

func (s *callStats) record(verb string, r pluginRun, wantOK bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[verb]++
	s.durTotal += r.took
	s.slowest = max(s.slowest, r.took)
	if r.took > callBound || r.killed {
		s.bad = append(s.bad, fmt.Sprintf("%s took %v (killed %v)", verb, r.took, r.killed))
	}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		s.bad = append(s.bad, fmt.Sprintf("%s panicked: %.300s", verb, r.stderr))
	}
	if r.err == nil {
		return
	}
	var e struct {
		Code *uint  `json:"code"`
		Msg  string `json:"msg"`
	}
	if json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code == nil || e.Msg == "" {
		s.bad = append(s.bad, fmt.Sprintf("%s: not one CNI error object: %s", verb, r))
		return
	}
	s.errors[fmt.Sprintf("%s/%d", verb, *e.Code)]++
	s.messages[fmt.Sprintf("%s/%d %s", verb, *e.Code, e.Msg)]++
	if wantOK {
		s.bad = append(s.bad, fmt.Sprintf("%s failed: %s", verb, strings.TrimSpace(r.stdout)))
	}
}

// cPod is one pod of the run.
type cPod struct {
	id   string
	path string
	pns  ns.NetNS
}

func (cr concurrencyRun) run(t *testing.T, bin string) {
	n := newCrashNode(t, bin, crashScenario{name: "concurrency", mode: "shared",
		entry: map[string]any{"sharedLink": map[string]string{"type": "macvlan"}}, ipam: true})
	st := &callStats{calls: map[string]int{}, errors: map[string]int{}, messages: map[string]int{}}
	var abandoned sync.Map // pod id -> *cPod, ADDed and never DELed
	stop := make(chan struct{})
	var corrupter sync.WaitGroup
	damage := 0
	if cr.corrupt {
		corrupter.Add(1)
		go func() { defer corrupter.Done(); damage = corruptRecords(n.dataDir, stop) }()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cr.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cr.worker(n, st, w, &abandoned)
		}()
	}
	wg.Wait()
	close(stop)
	corrupter.Wait()
	took := time.Since(start)
	cr.finish(t, n, st, &abandoned)
	t.Logf("%d workers x %d pods in %v: calls %v, errors %v, slowest %v, mean %v, records damaged %d, pods left with a child after DEL %d",
		cr.workers, cr.pods, took.Round(time.Millisecond), st.calls, st.errors, st.slowest.Round(time.Millisecond),
		(st.durTotal / time.Duration(max(1, total(st.calls)))).Round(time.Millisecond), damage, st.childrenLeft)
	for m, c := range st.messages {
		t.Logf("%4d x %s", c, m)
	}
	for _, b := range st.bad {
		t.Error(b)
	}

}

func total(m map[string]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

// worker runs its pods one after the other: ADD, CHECK, one of STATUS, GC
// or CHECK, then DEL (twice for some), or abandons the pod.
func (cr concurrencyRun) worker(n *crashNode, st *callStats, w int, abandoned *sync.Map) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	for i := range cr.pods {
		pns, err := testutils.NewNS()
		if err != nil {
			st.mu.Lock()
			st.bad = append(st.bad, fmt.Sprintf("new netns: %v", err))
			st.mu.Unlock()
			return
		}
		p := &cPod{id: podID(w, i), path: pns.Path(), pns: pns}
		cp := &crashPod{ns: pns, rt: &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.path, IfName: "eth0"}}
		ok := !cr.corrupt
		add := n.execPlugin("ADD", cp, prevResultFor(p, w, i))
		st.record("ADD", add, ok)
		st.record("CHECK", n.execPlugin("CHECK", cp, []byte(add.stdout)), ok && add.err == nil)
		switch rng.IntN(3) {
		case 0:
			st.record("STATUS", n.execPlugin("STATUS", cp, nil), ok)
		case 1:
			st.record("GC", n.execPluginConf("GC", cp, nil, cr.validList(abandoned)), ok)
		default:
			st.record("CHECK", n.execPlugin("CHECK", cp, []byte(add.stdout)), ok && add.err == nil)
		}
		if (w*cr.pods+i)%10 == 3 {
			abandoned.Store(p.id, p)
			continue
		}
		st.record("DEL", n.execPlugin("DEL", cp, nil), ok)
		if i%4 == 0 {
			st.record("DEL", n.execPlugin("DEL", cp, nil), ok)
		}
		checkPodEmpty(st, p, "after DEL", cr.corrupt)
		netnstest.Delete(pns)
	}
}

// validList is the runtime's GC list: every attachment it has not given up
// on. A pod joins the abandoned set only once its ADD returned, so even a
// list read long before the GC runs never names a pod whose ADD is under way
// (a real runtime holds its own lock for that).
func (cr concurrencyRun) validList(abandoned *sync.Map) map[string]any {
	var valid []map[string]string
	for w := range cr.workers {
		for i := range cr.pods {
			id := podID(w, i)
			if _, gone := abandoned.Load(id); !gone {
				valid = append(valid, map[string]string{"containerID": id, "ifname": "eth0"})
			}
		}
	}
	return map[string]any{"cni.dev/valid-attachments": valid}
}

func podID(w, i int) string { return fmt.Sprintf("ctr-w%d-p%d", w, i) }

func prevResultFor(p *cPod, w, i int) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": crashCNIVersion,
		"interfaces": []any{map[string]string{"name": "eth0", "mac": fmt.Sprintf("02:00:00:00:%02x:%02x", w, i), "sandbox": p.path}},
		"ips":        []any{map[string]any{"address": fmt.Sprintf("10.78.%d.%d/16", w, i+1), "interface": 0}}})
	return b
}

// checkPodEmpty notes a pod netns that still holds more than lo: a failure,
// or only counted when records were damaged (then DEL cannot know the child).
func checkPodEmpty(st *callStats, p *cPod, when string, damaged bool) {
	var names []string
	_ = p.pns.Do(func(ns.NetNS) error {
		l, err := linkState(false)
		names = l
		return err
	})
	if len(names) == 1 && strings.HasPrefix(names[0], "link lo ") {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if damaged {
		st.childrenLeft++
		return
	}
	st.bad = append(st.bad, fmt.Sprintf("pod %s %s holds %v", p.id, when, names))
}

// finish runs the final GC (nothing valid) and checks nothing is left.
func (cr concurrencyRun) finish(t *testing.T, n *crashNode, st *callStats, abandoned *sync.Map) {
	if !cr.corrupt {
		// Before the final GC: only abandoned pods are recorded, readable.
		recs, err := state.New(n.dataDir).List()
		if err != nil {
			t.Errorf("records unreadable after the run: %v", err)
		}
		for _, r := range recs {
			if _, ok := abandoned.Load(r.ContainerID); !ok {
				t.Errorf("record of %s left, its pod was deleted", r.ContainerID)
			}
		}
		t.Logf("before the final GC: %d records, all of abandoned pods", len(recs))
	}
	last := &crashPod{rt: &libcni.RuntimeConf{ContainerID: "gc", IfName: "eth0"}}
	st.record("GC", n.execPlugin("GC", last, nil), true)
	var left []string
	abandoned.Range(func(_, v any) bool {
		p := v.(*cPod)
		if !cr.corrupt {
			checkPodEmpty(st, p, "after the final GC", false)
		}
		netnstest.Delete(p.pns)
		return true
	})
	records, _ := filepath.Glob(filepath.Join(n.dataDir, "attachments", "*"))
	hidden, _ := filepath.Glob(filepath.Join(n.dataDir, "attachments", ".*"))
	left = append(append(left, records...), hidden...)
	leases := leaseFiles(t, n.ipamDir)
	q, _ := os.ReadDir(filepath.Join(n.dataDir, "quarantine"))
	t.Logf("after the final GC: %d records/temp files, %d leases, %d quarantined", len(left), len(leases), len(q))
	if len(left) != 0 {
		t.Errorf("records left: %v", left)
	}
	switch {
	case len(leases) == 0:
	case cr.corrupt:
		// A damaged record no longer says which leases its pod holds, and
		// host-local v1.9.1 has no GC of its own: reported, not failed.
		t.Logf("LEAK (damaged records): %d IPAM leases left after the final GC", len(leases))
	default:
		t.Errorf("leases left: %v", leases)
	}
}

// leaseFiles are host-local's lease files (named by the IP) under dir.
func leaseFiles(t *testing.T, dir string) []string {
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.ContainsAny(info.Name(), ".:") &&
			!strings.HasPrefix(info.Name(), "last_reserved_ip") && info.Name() != "lock" {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// podsPerWorker is def, or RDMA_CHAIN_CONCURRENCY_PODS (e.g. 50 for the
// full 16 x 50 run; the default keeps the run near a minute on 2 cores).
func podsPerWorker(def int) int {
	if v, err := strconv.Atoi(os.Getenv("RDMA_CHAIN_CONCURRENCY_PODS")); err == nil && v > 0 {
		return v
	}
	return def
}
