package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/rdma-chain/rdma-chain/internal/testonly/syncbuf"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/cri"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

var now = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// fakeNode is a state dir with records and a fake runtime and kernel.
type fakeNode struct {
	dir       string
	out       bytes.Buffer
	sandboxes []cri.Sandbox
	criErr    error
	gone      map[string]bool
	// ids are the netns paths that name another netns than recorded.
	ids     map[string]netnsid.ID
	delErr  map[string]error
	deleted []string
	stdins  []string
	// stranded names the containers whose pods died and whose devices are
	// back; read under the reconciler's mu.
	stranded []string
	// watching, when set, receives the sink of the node's one event source.
	watching chan eventSink
	hook     hookKernel
	// order is every DEL and hold, in order.
	order []string
}

func newFakeNode(t *testing.T, recs ...*state.Record) *fakeNode {
	n := &fakeNode{dir: t.TempDir(), gone: map[string]bool{}, ids: map[string]netnsid.ID{}, delErr: map[string]error{}}
	for _, r := range recs {
		if err := state.New(n.dir).Put(r); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func rec(network, cid, netns string, age time.Duration) *state.Record {
	return &state.Record{Network: network, ContainerID: cid, IfName: "eth0", NetNS: netns, NetNSIno: recordedNetns.Inode, NetNSCookie: recordedNetns.Cookie, Mode: rdma.ModeShared,
		Pod:   state.Pod{Namespace: "default", Name: "pod-" + cid, UID: "uid-" + cid},
		Links: []state.Link{{Device: "rxe0", Kind: state.LinkIPVlan, Step: state.StepDone}}, CreatedAt: now.Add(-age)}
}

func (n *fakeNode) reconciler(criSocket string) *reconciler {
	return &reconciler{
		nets:      []conflist.Network{{Name: "rdmanet", DataDir: n.dir, Stdin: []byte(`{"name":"rdmanet"}`)}},
		criSocket: criSocket, cniPath: "/opt/cni/bin", minAge: time.Minute, log: slog.New(slog.NewTextHandler(&n.out, nil)), metrics: metrics.NewReconcile(),
		node: n,
	}
}

func (n *fakeNode) Sandboxes(context.Context, string) ([]cri.Sandbox, error) {
	return n.sandboxes, n.criErr
}

func (n *fakeNode) NetnsGone(r *state.Record) (bool, error) {
	return r.NetnsGone(n.idOf)
}

// recordedNetns is the netns identity ADD recorded in every fake record.
var recordedNetns = netnsid.ID{Inode: 4026532000, Cookie: 7}

func (n *fakeNode) NetnsReplaced(r *state.Record) (bool, error) {
	return r.NetnsReplaced(n.idOf)
}

// idOf identifies the netns at path: a /run/netns path names the recorded
// netns (another in n.ids, none in n.gone, an unreadable one when broken),
// any other path is read from the kernel.
func (n *fakeNode) idOf(path string) (netnsid.ID, error) {
	if id, ok := n.ids[path]; ok {
		return id, nil
	}
	switch {
	case path == "/run/netns/broken":
		return netnsid.ID{}, errors.New("permission denied")
	case n.gone[path]:
		return netnsid.ID{}, fmt.Errorf("open netns %s: %w", path, netnsid.ErrGone)
	case strings.HasPrefix(path, "/run/netns/"):
		return recordedNetns, nil
	}
	return netnsid.Of(path)
}

func (n *fakeNode) Del(a *skel.CmdArgs) error {
	if err := n.delErr[a.ContainerID]; err != nil {
		return err
	}
	n.deleted = append(n.deleted, a.ContainerID)
	n.order = append(n.order, "del "+a.ContainerID)
	// As DEL does: the record goes.
	recs, _ := state.New(n.dir).List()
	for _, r := range recs {
		if r.ContainerID == a.ContainerID && r.IfName == a.IfName {
			_ = state.New(n.dir).Delete(r.Key())
		}
	}
	n.stdins = append(n.stdins, string(a.StdinData)+" "+a.Args+" "+a.Path+" netns="+a.Netns+" if="+a.IfName)
	return nil
}

func (n *fakeNode) Now() time.Time { return now }

func (n *fakeNode) Stranded(r *state.Record) (string, error) {
	if r.ContainerID == "broken" {
		return "", errors.New("netns cookie: permission denied")
	}
	if slices.Contains(n.stranded, r.ContainerID) {
		return "netns " + r.NetNS + " is gone and RDMA device simrdma0 is back on the host", nil
	}
	return "", nil
}

func (n *fakeNode) Watch(_ context.Context, sink eventSink) {
	if n.watching != nil {
		n.watching <- sink
	}
}

func TestReconcileNetnsLiveness(t *testing.T) {
	n := newFakeNode(t,
		rec("rdmanet", "live", "/run/netns/live", time.Hour),
		rec("rdmanet", "dead", "/run/netns/dead", time.Hour),
		rec("rdmanet", "young-dead", "/run/netns/young", time.Second),
		rec("rdmanet", "broken", "/run/netns/broken", time.Hour),
		rec("othernet", "other", "/run/netns/dead", time.Hour),
		rec("rdmanet", "fails", "/run/netns/dead2", time.Hour),
	)
	n.gone["/run/netns/dead"], n.gone["/run/netns/young"], n.gone["/run/netns/dead2"] = true, true, true
	n.delErr["fails"] = errors.New("boom")
	problems := n.reconciler("").pass(context.Background())
	slices.Sort(n.deleted)
	if want := []string{"dead", "young-dead"}; !slices.Equal(n.deleted, want) {
		t.Errorf("released %v, want %v", n.deleted, want)
	}
	if problems != 2 { // broken netns, failed DEL
		t.Errorf("problems %d, want 2\n%s", problems, n.out.String())
	}
	out := n.out.String()
	for _, want := range []string{
		`level=INFO msg="released an attachment" attachment="rdmanet/dead/eth0 (pod default/pod-dead, shared, ipvlan rxe0)" why="netns /run/netns/dead is gone"`,
		`level=WARN msg="kept an attachment" attachment="rdmanet/broken/eth0 (pod default/pod-broken, shared, ipvlan rxe0)" error="permission denied"`,
		`level=ERROR msg="cannot release an attachment" attachment="rdmanet/fails/eth0`,
		`level=INFO msg="pass done" released=2 kept=2 problems=2 liveness=netns`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if want := `{"name":"rdmanet"} IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-dead;K8S_POD_UID=uid-dead /opt/cni/bin netns= if=eth0`; !slices.Contains(n.stdins, want) {
		t.Errorf("DEL args %q, want %q", n.stdins, want)
	}
}

func TestReconcileCRI(t *testing.T) {
	n := newFakeNode(t,
		rec("rdmanet", "listed", "/run/netns/a", time.Hour),
		rec("rdmanet", "notready", "/run/netns/b", time.Hour),
		rec("rdmanet", "gone-live-netns", "/run/netns/c", time.Hour),
		rec("rdmanet", "starting", "/run/netns/d", 10*time.Second),
	)
	n.sandboxes = []cri.Sandbox{{ID: "listed"}, {ID: "notready", State: cri.StateNotReady}, {ID: "unrelated"}}
	if problems := n.reconciler("/run/containerd/containerd.sock").pass(context.Background()); problems != 0 {
		t.Errorf("problems %d\n%s", problems, n.out.String())
	}
	if want := []string{"gone-live-netns"}; !slices.Equal(n.deleted, want) {
		t.Errorf("released %v, want %v\n%s", n.deleted, want, n.out.String())
	}
	if !strings.Contains(n.out.String(), `msg="kept an attachment CRI does not list: too young" attachment="rdmanet/starting/eth0 (pod default/pod-starting, shared, ipvlan rxe0)" age=10s`) {
		t.Errorf("output:\n%s", n.out.String())
	}
}

func TestReconcileCRIUnreachableReleasesNothing(t *testing.T) {
	n := newFakeNode(t, rec("rdmanet", "x", "/run/netns/x", time.Hour))
	n.gone["/run/netns/x"] = true
	n.criErr = errors.New("connection refused")
	if problems := n.reconciler("/run/cri.sock").pass(context.Background()); problems != 1 || len(n.deleted) != 0 {
		t.Errorf("problems %d, released %v", problems, n.deleted)
	}
}

func TestReconcileCRIEmptyListReleasesNothing(t *testing.T) {
	n := newFakeNode(t, rec("rdmanet", "x", "/run/netns/x", time.Hour))
	if problems := n.reconciler("/run/other.sock").pass(context.Background()); problems != 1 || len(n.deleted) != 0 ||
		!strings.Contains(n.out.String(), "lists no pod sandbox at all") {
		t.Errorf("problems %d, released %v\n%s", problems, n.deleted, n.out.String())
	}
}

func TestPodArgs(t *testing.T) {
	for _, tt := range []struct {
		pod  state.Pod
		want string
	}{
		{state.Pod{Namespace: "ns", Name: "p", UID: "u"}, "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u"},
		{state.Pod{Name: "p"}, "IgnoreUnknown=1;K8S_POD_NAME=p"},
		{state.Pod{Namespace: "ns", Name: "p;K8S_POD_NAME=q"}, "IgnoreUnknown=1"},
	} {
		if got := podArgs(tt.pod); got != tt.want {
			t.Errorf("podArgs(%+v) = %q, want %q", tt.pod, got, tt.want)
		}
	}
}

// TestReconcileLoop checks that every pass reads the networks again (a
// rewritten conflist is picked up, a broken one keeps the last good
// one), and the loop ends with its context.
func TestReconcileLoop(t *testing.T) {
	n := newFakeNode(t, rec("rdmanet", "dead", "/run/netns/dead", time.Hour), rec("other", "dead2", "/run/netns/dead", time.Hour))
	n.gone["/run/netns/dead"] = true
	r := n.reconciler("")
	ctx, cancel := context.WithCancel(context.Background())
	reloads := 0
	r.reload = func() error {
		reloads++
		switch reloads {
		case 2:
			return errors.New("conflist unreadable")
		case 3:
			r.nets = []conflist.Network{{Name: "other", DataDir: n.dir, Stdin: []byte(`{"name":"other"}`)}}
		case 4:
			cancel()
		}
		return nil
	}
	done := make(chan struct{})
	go func() { r.loop(ctx, time.Millisecond, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("loop did not end with its context")
	}
	if want := []string{"dead", "dead2"}; !slices.Equal(n.deleted, want) {
		t.Errorf("released %v, want %v\n%s", n.deleted, want, n.out.String())
	}
	if !strings.Contains(n.out.String(), `msg="cannot read the configuration: using the one read before (said once while it lasts)" error="conflist unreadable"`) {
		t.Errorf("output:\n%s", n.out.String())
	}
}

func exclusiveRec(cid string) *state.Record {
	r := rec("rdmanet", cid, "/run/netns/"+cid, time.Hour)
	r.Mode = "exclusive"
	r.Links = []state.Link{{Device: "simrdma0", Kind: state.LinkMoved, Step: state.StepDone, RDMAMoved: true}}
	return r
}

// TestRepairOnEvent checks that an event repairs the stranded
// attachments through DEL (and nothing else), logs the time since the
// event and counts.
func TestRepairOnEvent(t *testing.T) {
	n := newFakeNode(t, exclusiveRec("dead"), exclusiveRec("live"), exclusiveRec("broken"), exclusiveRec("fails"))
	n.delErr["fails"] = errors.New("boom")
	n.stranded = []string{"dead", "fails"}
	r := n.reconciler("/run/cri.sock")
	r.repair(time.Now().Add(-300 * time.Millisecond))
	if want := []string{"dead"}; !slices.Equal(n.deleted, want) {
		t.Errorf("repaired %v, want %v", n.deleted, want)
	}
	out := n.out.String()
	if !regexp.MustCompile(`msg="repaired an attachment" attachment="rdmanet/dead/eth0 \(pod default/pod-dead, exclusive, moved simrdma0\)" why="netns /run/netns/dead is gone and RDMA device simrdma0 is back on the host" trigger=event afterEvent=0\.[3-9]\ds`).MatchString(out) ||
		!strings.Contains(out, `level=ERROR msg="cannot repair an attachment" attachment="rdmanet/fails/eth0`) {
		t.Errorf("output:\n%s", out)
	}
	m := r.metrics
	if testutil.ToFloat64(m.Repairs.WithLabelValues("rdmanet", metrics.TriggerEvent)) != 1 || testutil.ToFloat64(m.RepairFailures.WithLabelValues("rdmanet")) != 1 ||
		testutil.ToFloat64(m.Passes.WithLabelValues(metrics.TriggerEvent)) != 1 {
		t.Errorf("repairs/failures/passes not counted once each")
	}
	want := `
# HELP rdma_chain_repair_duration_seconds Time from the event that triggered a repair to the end of the plugin's DEL that restored the device.
# TYPE rdma_chain_repair_duration_seconds histogram
rdma_chain_repair_duration_seconds_bucket{le="0.05"} 0
rdma_chain_repair_duration_seconds_bucket{le="0.1"} 0
rdma_chain_repair_duration_seconds_bucket{le="0.25"} 0
rdma_chain_repair_duration_seconds_bucket{le="0.5"} 1
rdma_chain_repair_duration_seconds_bucket{le="1"} 1
rdma_chain_repair_duration_seconds_bucket{le="2"} 1
rdma_chain_repair_duration_seconds_bucket{le="5"} 1
rdma_chain_repair_duration_seconds_bucket{le="10"} 1
rdma_chain_repair_duration_seconds_bucket{le="30"} 1
rdma_chain_repair_duration_seconds_bucket{le="+Inf"} 1
`
	// The sum varies with the machine: compare the buckets only.
	got, err := testutil.CollectAndFormat(m.RepairSeconds, expfmt.TypeTextPlain, "rdma_chain_repair_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(string(got), l) {
			t.Errorf("histogram lacks %q:\n%s", l, got)
		}
	}
}

// TestPassRepairsWhatCRIStillLists checks that the interval pass is the
// safety net of the event repair: a sandbox CRI still lists whose netns
// died and whose device came back is repaired; a live one is kept.
func TestPassRepairsWhatCRIStillLists(t *testing.T) {
	n := newFakeNode(t, exclusiveRec("dead"), exclusiveRec("live"))
	n.sandboxes = []cri.Sandbox{{ID: "dead"}, {ID: "live"}}
	n.stranded = []string{"dead"}
	r := n.reconciler("/run/cri.sock")
	if problems := r.pass(context.Background()); problems != 0 {
		t.Errorf("problems %d\n%s", problems, n.out.String())
	}
	if want := []string{"dead"}; !slices.Equal(n.deleted, want) {
		t.Errorf("released %v, want %v", n.deleted, want)
	}
	if testutil.ToFloat64(r.metrics.Repairs.WithLabelValues("rdmanet", metrics.TriggerInterval)) != 1 {
		t.Errorf("not counted as an interval repair")
	}
	if !strings.Contains(n.out.String(), `msg="pass done" released=1 kept=1 problems=0`) {
		t.Errorf("output:\n%s", n.out.String())
	}
}

// TestPassIPAMOutsideWhatItSees checks that, with IPAMDirsUnder, a
// network whose host-local leases live outside it is a problem of the
// pass, logged with the directory; one under it, or without host-local,
// is not.
func TestPassIPAMOutsideWhatItSees(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		problems int
	}{
		{"", 0},
		{"/var/lib/cni/networks", 0},
		{"/var/lib/cni", 0},
		{"/var/lib/cni-other", 1},
		{"/run/ipam6", 1},
	} {
		n := newFakeNode(t)
		n.sandboxes = []cri.Sandbox{{ID: "x"}}
		r := n.reconciler("/run/cri.sock")
		r.ipamUnder = "/var/lib/cni"
		r.nets[0].IPAMDataDir = tc.dir
		r.metrics.Problems.Set(-1)
		_ = r.passErr(context.Background())
		if got := testutil.ToFloat64(r.metrics.Problems); got != float64(tc.problems) {
			t.Errorf("%q: rdma_chain_reconcile_problems %v, want %d\n%s", tc.dir, got, tc.problems, n.out.String())
		}
		if tc.problems > 0 && !strings.Contains(n.out.String(), "ipamDataDir="+tc.dir+" seen=/var/lib/cni") {
			t.Errorf("%q: output:\n%s", tc.dir, n.out.String())
		}
	}
}

// TestLoopRepairsOnEvent checks that between two passes of a long
// interval, an event from a watched source runs a repair.
func TestLoopRepairsOnEvent(t *testing.T) {
	n := newFakeNode(t, exclusiveRec("dead"))
	r := n.reconciler("/run/cri.sock")
	n.sandboxes = []cri.Sandbox{{ID: "dead"}}
	n.watching = make(chan eventSink, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.loop(ctx, time.Hour, nil); close(done) }()
	sink := <-n.watching
	// After the first pass has ended (it kept the record: its sandbox is
	// listed and nothing is stranded yet), before the event: else the
	// first pass itself releases it.
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		out := n.out.String()
		if !strings.Contains(out, `msg="pass done"`) {
			return false, "no pass ended:\n" + out
		}
		n.stranded = []string{"dead"}
		return true, ""
	})
	sink.fire("rtnetlink")
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(r.metrics.Repairs.WithLabelValues("rdmanet", metrics.TriggerEvent)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no repair after the event:\n%s", n.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if testutil.ToFloat64(r.metrics.Events.WithLabelValues("rtnetlink")) != 1 {
		t.Error("event not counted")
	}
}

// TestEnsureEntryAfterAgentRewrite checks that, when the primary's agent
// rewrites its conflist without the rdma-chain entry between passes,
// each pass's load puts it back after the named plugin, logs it and
// counts it, and a conflist that kept its entry is not touched.
func TestEnsureEntryAfterAgentRewrite(t *testing.T) {
	dir := t.TempDir()
	agent := `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap"}]}`
	rewrite := func() {
		// As agents do: a new file renamed over the old one.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(agent), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "10-calico.conflist")); err != nil {
			t.Fatal(err)
		}
	}
	rewrite()
	if err := os.WriteFile(filepath.Join(dir, "99-other.conflist"), []byte(agent), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	m := metrics.NewReconcile()
	o := Options{Conflists: []string{conflist.Auto}, ConfDir: dir, EnsureEntry: true, After: "calico",
		Set: []byte(`{"mode":"shared","dataDir":"` + filepath.Join(dir, "state") + `"}`)}
	load := o.loader(m, slog.New(slog.NewTextHandler(&out, nil)), newRestoreBackoff(make(chan struct{}, 1)))
	for pass, rewritten := range []bool{true, false, true} {
		if rewritten && pass > 0 {
			rewrite()
		}
		nets, err := load()
		if err != nil || len(nets) != 1 || nets[0].Name != "k8s-pod-network" || nets[0].Path != filepath.Join(dir, "10-calico.conflist") {
			t.Fatalf("pass %d: networks %+v, %v\n%s", pass, nets, err, out.String())
		}
	}
	if got := testutil.ToFloat64(m.ConflistRestores); got != 2 {
		t.Errorf("restores counted %v, want 2", got)
	}
	if n := strings.Count(out.String(), `msg="put the rdma-chain entry back: another agent had rewritten the conflist without it" conflist=`+filepath.Join(dir, "10-calico.conflist")); n != 2 {
		t.Errorf("logged %d restores, want 2:\n%s", n, out.String())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "10-calico.conflist"))
	if !strings.Contains(string(data), `{"type":"calico"}, {"type": "rdma-chain", "mode": "shared"`) {
		t.Errorf("conflist after the restore:\n%s", data)
	}
	if other, _ := os.ReadFile(filepath.Join(dir, "99-other.conflist")); string(other) != agent {
		t.Errorf("a conflist other than the primary's changed:\n%s", other)
	}
}

// TestEnsureEntryOnConfDirChange checks that with a pass only every hour,
// an agent that rewrites its conflist (renaming a new file over it, or
// writing it in place) gets the entry put back within seconds, through the
// inotify watch of the conf dir on the real kernel; the reload after the
// plugin's own write finds the entry and writes nothing more.
func TestEnsureEntryOnConfDirChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-calico.conflist")
	agent := []byte(`{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico"}]}`)
	if err := os.WriteFile(path, agent, 0o644); err != nil {
		t.Fatal(err)
	}
	var loadOut syncbuf.Buffer
	r, stop := runEnsuringLoop(t, dir, &loadOut)
	waitRestores := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(r.metrics.ConflistRestores) < want {
			if time.Now().After(deadline) {
				t.Fatalf("restores %v, want %v", testutil.ToFloat64(r.metrics.ConflistRestores), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		data, _ := os.ReadFile(path)
		if !strings.Contains(string(data), `"type": "rdma-chain"`) {
			t.Fatalf("restore %v counted, conflist:\n%s", want, data)
		}
	}
	waitRestores(1) // the first pass
	for i, rewrite := range []func() error{
		func() error { // a new file renamed over the old one
			tmp := filepath.Join(dir, ".tmp")
			if err := os.WriteFile(tmp, agent, 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		},
		func() error { return os.WriteFile(path, agent, 0o644) }, // in place
	} {
		if err := rewrite(); err != nil {
			t.Fatal(err)
		}
		waitRestores(float64(i + 2))
	}
	stop()
	if got := testutil.ToFloat64(r.metrics.ConflistRestores); got != 3 {
		t.Errorf("restores %v after the plugin's own writes, want 3\n%s", got, loadOut.String())
	}
}

// TestEnsureEntryNeedsAConflist checks that no conflist at all fails
// the load, and nothing is written.
func TestEnsureEntryNeedsAConflist(t *testing.T) {
	dir := t.TempDir()
	o := Options{Conflists: []string{conflist.Auto}, ConfDir: dir, EnsureEntry: true}
	if _, err := o.loader(metrics.NewReconcile(), slog.New(slog.DiscardHandler), newRestoreBackoff(nil))(); !errors.Is(err, conflist.ErrNoConflist) {
		t.Errorf("load without a conflist: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

// TestCRILossIsVisible checks that a pass that cannot reach CRI is
// counted and logged, and /healthz's check fails once CRI has been
// unreachable longer than the grace, and recovers when CRI answers again.
func TestCRILossIsVisible(t *testing.T) {
	n := newFakeNode(t, rec("rdmanet", "a", "/run/netns/a", time.Hour))
	r := n.reconciler("/run/cri.sock")
	r.cri = criHealth{grace: time.Minute, lastOK: now.Add(-30 * time.Second)}
	n.criErr = errors.New("connection refused")
	if p := r.pass(context.Background()); p != 1 {
		t.Errorf("problems %d, want 1", p)
	}
	if got := testutil.ToFloat64(r.metrics.CRIFailures); got != 1 {
		t.Errorf("CRI failures %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.metrics.Passes.WithLabelValues(metrics.TriggerInterval)); got != 1 {
		t.Errorf("passes %v, want 1: a pass without CRI is still a pass", got)
	}
	if err := r.cri.healthy(r.criSocket, now); err != nil {
		t.Errorf("within the grace: %v", err)
	}
	if err := r.cri.healthy(r.criSocket, now.Add(31*time.Second)); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("past the grace: %v", err)
	}
	n.criErr = nil
	n.sandboxes = []cri.Sandbox{{ID: "a"}}
	r.pass(context.Background())
	if err := r.cri.healthy(r.criSocket, now.Add(time.Hour)); err != nil {
		t.Errorf("after CRI answered: %v", err)
	}
	if err := (&criHealth{lastErr: errors.New("x")}).healthy("", now); err != nil {
		t.Errorf("without CRI: %v", err)
	}
}

// runEnsuringLoop runs reconcile's loop over a fake node with --conflist
// auto and --ensure-entry on the conf dir dir, watching it, until stop or
// the test's end; the loader logs to loadOut.
func runEnsuringLoop(t *testing.T, dir string, loadOut io.Writer) (r *reconciler, stop func()) {
	t.Helper()
	n := newFakeNode(t)
	r = n.reconciler("")
	o := Options{Conflists: []string{conflist.Auto}, ConfDir: dir, EnsureEntry: true, After: "calico",
		Set: []byte(`{"mode":"shared","dataDir":"` + filepath.Join(dir, "state") + `"}`)}
	changed := make(chan struct{}, 1)
	load := o.loader(r.metrics, slog.New(slog.NewTextHandler(loadOut, nil)), newRestoreBackoff(changed))
	r.reload = func() error {
		nets, err := load()
		if err == nil {
			r.setNetworks(nets)
		}
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	watchConfDirs(ctx, conflistDirs(o.Conflists, o.ConfDir), changed, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { r.loop(ctx, time.Hour, changed); close(done) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return r, stop
}

// TestReloadFailureSaidOnce checks that a configuration that fails to
// load the same way again and again (an agent rewriting the conflist
// while the entry's restore backs off) is said once until a load
// succeeds or fails otherwise.
func TestReloadFailureSaidOnce(t *testing.T) {
	n := newFakeNode(t)
	r := n.reconciler("")
	errs := []error{errors.New("no entry"), errors.New("no entry"), errors.New("no entry"), nil, errors.New("no entry"), errors.New("unreadable")}
	i := 0
	r.reload = func() error { i++; return errs[i-1] }
	for range errs {
		r.reloadNetworks()
	}
	out := n.out.String()
	if got := strings.Count(out, `error="no entry"`); got != 2 {
		t.Errorf("the same failure said %d times, want twice (before and after the success):\n%s", got, out)
	}
	if !strings.Contains(out, `error=unreadable`) {
		t.Errorf("another failure not said:\n%s", out)
	}
}

// TestReleaseFailureSaidOnce checks that a release that fails the same
// way on every pass is an ERROR once, said again when its error changes,
// and counted as a problem of each pass.
func TestReleaseFailureSaidOnce(t *testing.T) {
	n := newFakeNode(t, rec("rdmanet", "fails", "/run/netns/dead", time.Hour))
	n.gone["/run/netns/dead"] = true
	r := n.reconciler("")
	for i, delErr := range []string{"boom", "boom", "boom", "bang"} {
		n.delErr["fails"] = errors.New(delErr)
		if problems := r.pass(context.Background()); problems != 1 {
			t.Errorf("pass %d: problems %d, want 1", i, problems)
		}
	}
	errs := regexp.MustCompile(`level=ERROR msg="cannot release an attachment" .* error=(\w+)`).FindAllStringSubmatch(n.out.String(), -1)
	var said []string
	for _, m := range errs {
		said = append(said, m[1])
	}
	if want := []string{"boom", "bang"}; !slices.Equal(said, want) {
		t.Errorf("ERROR lines say %q, want %q:\n%s", said, want, n.out.String())
	}
}

// TestFailedListForgetsNothing checks that a pass whose listing of the
// records fails forgets nothing it said once (a failed release, an
// attachment kept unverified): the pass after it, listing them again,
// does not say them again.
func TestFailedListForgetsNothing(t *testing.T) {
	for _, tc := range []struct {
		name, cid, netns, cri, said string
	}{
		{name: "release failed", cid: "fails", netns: "/run/netns/dead", said: `level=ERROR msg="cannot release an attachment"`},
		{name: "kept unverified", cid: "unreadable", netns: "/run/netns/broken", cri: "/run/cri.sock", said: `msg="kept an attachment CRI lists`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(t, rec("rdmanet", tc.cid, tc.netns, time.Hour))
			n.gone["/run/netns/dead"] = true
			n.delErr["fails"] = errors.New("boom")
			n.sandboxes = []cri.Sandbox{{ID: "other"}}
			if tc.cri != "" {
				n.sandboxes = append(n.sandboxes, cri.Sandbox{ID: tc.cid})
			}
			r := n.reconciler(tc.cri)
			for i, listFails := range []bool{false, true, false} {
				// A directory every user may write is refused: List fails.
				mode := os.FileMode(0o700)
				if listFails {
					mode = 0o777
				}
				if err := os.Chmod(n.dir, mode); err != nil {
					t.Fatal(err)
				}
				if problems := r.pass(context.Background()); problems != 1 {
					t.Errorf("pass %d: problems %d, want 1\n%s", i+1, problems, n.out.String())
				}
			}
			if !strings.Contains(n.out.String(), `msg="cannot list the attachments"`) {
				t.Fatalf("the second pass listed the records:\n%s", n.out.String())
			}
			if got := strings.Count(n.out.String(), tc.said); got != 1 {
				t.Errorf("said %d times, want once:\n%s", got, n.out.String())
			}
		})
	}
}
