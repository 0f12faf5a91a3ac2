package metrics

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fakeUsage is a node whose processes hold RDMA objects: pid P is in the
// cgroup of pod uid-<P*10> (pid 7: its cgroup unreadable, pid 30 in none),
// a record's netns lives with its recorded inode unless its path is
// /run/netns/dead.
type fakeUsage struct {
	mode    rdma.Mode
	host    []rdmares.Entry
	pods    map[string][]rdmares.Entry // exclusive mode: what a pod netns's dump shows
	dumpErr error
}

func (f *fakeUsage) NetnsMode() (rdma.Mode, error) { return f.mode, nil }
func (f *fakeUsage) Resources(ns string) ([]rdmares.Entry, error) {
	if ns == "" {
		return f.host, f.dumpErr
	}
	return f.pods[ns], nil
}
func (f *fakeUsage) PodOf(pid uint32) (string, error) {
	switch pid {
	case 7:
		return "", os.ErrNotExist
	case 30:
		return "", nil
	}
	return fmt.Sprintf("uid-%d", pid*10), nil
}
func (f *fakeUsage) LiveNetns(r *state.Record) (uint64, error) {
	if r.NetNS == "/run/netns/dead" {
		return 0, nil
	}
	return r.NetNSIno, nil
}

// usagePod is a shared-mode attachment on rxe0 of pod UID uid-<ino> whose
// netns has inode ino.
func usagePod(name string, ino uint64) *state.Record {
	return &state.Record{Network: "rdmanet", ContainerID: name, IfName: "eth0", NetNS: "/run/netns/" + name, NetNSIno: ino,
		Mode: "shared", Pod: state.Pod{Namespace: "default", Name: name, UID: fmt.Sprintf("uid-%d", ino)},
		Links: []state.Link{{Device: "rxe0", Kind: state.LinkIPVlan, Step: state.StepDone}}}
}

func putRecords(t *testing.T, dir string, recs ...*state.Record) {
	t.Helper()
	for _, r := range recs {
		if err := state.New(dir).Put(r); err != nil {
			t.Fatal(err)
		}
	}
}

// sharedUsage is a node with pods a (pid 10, netns 100) and b (pid 20,
// netns 200) on rxe0; pid 30 is a host process, pid 7 one whose netns is
// unreadable; a kernel QP; pod dead's netns is gone; pod none passes
// through.
func sharedUsage(t *testing.T) (*fakeUsage, string, []conflist.Network) {
	dir := t.TempDir()
	dead := usagePod("dead", 500)
	dead.NetNS = "/run/netns/dead"
	none := usagePod("none", 600)
	none.Links, none.Mode = nil, ""
	putRecords(t, dir, usagePod("a", 100), usagePod("b", 200), dead, none)
	f := &fakeUsage{mode: rdma.ModeShared, host: []rdmares.Entry{
		{Kind: rdmares.QP, Device: "rxe0", ID: 17, PID: 10},
		{Kind: rdmares.CQ, Device: "rxe0", ID: 1, PID: 10},
		{Kind: rdmares.MR, Device: "rxe0", ID: 1, PID: 10, MRBytes: 4096},
		{Kind: rdmares.MR, Device: "rxe0", ID: 2, PID: 10, MRBytes: 1000},
		{Kind: rdmares.PD, Device: "rxe0", ID: 1, PID: 10},
		{Kind: rdmares.QP, Device: "rxe1", ID: 18, PID: 20},
		{Kind: rdmares.QP, Device: "rxe0", ID: 19, PID: 30},
		{Kind: rdmares.QP, Device: "rxe0", ID: 20, PID: 60},
		{Kind: rdmares.QP, Device: "rxe0", ID: 21, PID: 7},
		{Kind: rdmares.QP, Device: "rxe0", ID: 1, KernName: "ib_core"},
	}}
	return f, dir, []conflist.Network{{Name: "rdmanet", DataDir: dir}}
}

const usageHelp = `# HELP rdma_chain_pod_rdma_mr_bytes Bytes the processes of attached pods have registered as RDMA memory regions, by device.
# TYPE rdma_chain_pod_rdma_mr_bytes gauge
%s# HELP rdma_chain_pod_rdma_objects RDMA objects (type qp, cq, mr, pd) the processes of attached pods hold, by device, from the RDMA core's resource tracking.
# TYPE rdma_chain_pod_rdma_objects gauge
%s`

func TestUsageCollectorPerPod(t *testing.T) {
	f, _, nets := sharedUsage(t)
	c := NewUsageCollector(f, func() []conflist.Network { return nets }, true)
	want := fmt.Sprintf(usageHelp, `rdma_chain_pod_rdma_mr_bytes{device="rxe0",namespace="default",pod="a"} 5096
rdma_chain_pod_rdma_mr_bytes{device="rxe0",namespace="default",pod="b"} 0
rdma_chain_pod_rdma_mr_bytes{device="rxe1",namespace="default",pod="b"} 0
`, `rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="cq"} 1
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="mr"} 2
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="pd"} 1
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="qp"} 1
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="b",type="cq"} 0
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="b",type="mr"} 0
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="b",type="pd"} 0
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="b",type="qp"} 0
rdma_chain_pod_rdma_objects{device="rxe1",namespace="default",pod="b",type="cq"} 0
rdma_chain_pod_rdma_objects{device="rxe1",namespace="default",pod="b",type="mr"} 0
rdma_chain_pod_rdma_objects{device="rxe1",namespace="default",pod="b",type="pd"} 0
rdma_chain_pod_rdma_objects{device="rxe1",namespace="default",pod="b",type="qp"} 1
`) + `# HELP rdma_chain_rdma_objects_unattributed Tracked RDMA objects of no attached pod, by device, type and reason (kernel, no_pid, unreadable, no_pod, other_pod).
# TYPE rdma_chain_rdma_objects_unattributed gauge
rdma_chain_rdma_objects_unattributed{device="rxe0",reason="kernel",type="qp"} 1
rdma_chain_rdma_objects_unattributed{device="rxe0",reason="no_pod",type="qp"} 1
rdma_chain_rdma_objects_unattributed{device="rxe0",reason="other_pod",type="qp"} 1
rdma_chain_rdma_objects_unattributed{device="rxe0",reason="unreadable",type="qp"} 1
# HELP rdma_chain_usage_collect_errors Reads of this scrape's RDMA usage that failed: the netns mode, records, resource dumps, pods' netns.
# TYPE rdma_chain_usage_collect_errors gauge
rdma_chain_usage_collect_errors 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	f.dumpErr = errors.New("EPERM")
	if n, _ := valueOf(t, c, "rdma_chain_usage_collect_errors", map[string]string{}); n != 1 {
		t.Errorf("usage_collect_errors %v after a failed dump, want 1", n)
	}
}

// TestUsageCollectorSummed checks that without pod labels the pods'
// usage is summed per device; the unattributed objects are as with them.
func TestUsageCollectorSummed(t *testing.T) {
	f, _, nets := sharedUsage(t)
	c := NewUsageCollector(f, func() []conflist.Network { return nets }, false)
	want := fmt.Sprintf(usageHelp, `rdma_chain_pod_rdma_mr_bytes{device="rxe0"} 5096
rdma_chain_pod_rdma_mr_bytes{device="rxe1"} 0
`, `rdma_chain_pod_rdma_objects{device="rxe0",type="cq"} 1
rdma_chain_pod_rdma_objects{device="rxe0",type="mr"} 2
rdma_chain_pod_rdma_objects{device="rxe0",type="pd"} 1
rdma_chain_pod_rdma_objects{device="rxe0",type="qp"} 1
rdma_chain_pod_rdma_objects{device="rxe1",type="cq"} 0
rdma_chain_pod_rdma_objects{device="rxe1",type="mr"} 0
rdma_chain_pod_rdma_objects{device="rxe1",type="pd"} 0
rdma_chain_pod_rdma_objects{device="rxe1",type="qp"} 1
`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rdma_chain_pod_rdma_mr_bytes", "rdma_chain_pod_rdma_objects"); err != nil {
		t.Error(err)
	}
}

// TestUsageCollectorByUID checks that a pod is its UID: its second
// attachment adds no series and counts its objects once; an attachment
// without a UID (the runtime passed no K8S_POD_UID) has no series, and
// its processes' objects count on no pod.
func TestUsageCollectorByUID(t *testing.T) {
	dir := t.TempDir()
	a2 := usagePod("a", 100)
	a2.ContainerID, a2.IfName = "a", "net1"
	anon := usagePod("anon", 300)
	anon.Pod.UID = ""
	putRecords(t, dir, usagePod("a", 100), a2, anon)
	f := &fakeUsage{mode: rdma.ModeShared, host: []rdmares.Entry{
		{Kind: rdmares.QP, Device: "rxe0", ID: 17, PID: 10},
		{Kind: rdmares.QP, Device: "rxe0", ID: 18, PID: 30},
		{Kind: rdmares.QP, Device: "rxe0", ID: 19, PID: 31},
	}}
	c := NewUsageCollector(f, func() []conflist.Network { return []conflist.Network{{Name: "rdmanet", DataDir: dir}} }, true)
	if v, ok := valueOf(t, c, "rdma_chain_pod_rdma_objects", map[string]string{"device": "rxe0", "namespace": "default", "pod": "a", "type": "qp"}); !ok || v != 1 {
		t.Errorf("pod a's QPs %v (%v), want 1", v, ok)
	}
	if n := testutil.CollectAndCount(c, "rdma_chain_pod_rdma_objects"); n != 4 {
		t.Errorf("%d object series, want pod a's 4", n)
	}
	if v, _ := valueOf(t, c, "rdma_chain_rdma_objects_unattributed", map[string]string{"device": "rxe0", "type": "qp", "reason": "other_pod"}); v != 1 {
		t.Errorf("other_pod QPs %v, want 1 (pid 31, of a pod no record with a UID names)", v)
	}
}

// TestUsageCollectorExclusive checks that in exclusive mode a pod's
// device is dumped in its netns, and its processes' objects are the
// pod's.
func TestUsageCollectorExclusive(t *testing.T) {
	dir := t.TempDir()
	x := usagePod("x", 400)
	x.Mode = "exclusive"
	x.Links = []state.Link{{Device: "mlx5_1", Kind: state.LinkMoved, Step: state.StepDone, RDMAMoved: true}}
	putRecords(t, dir, x)
	f := &fakeUsage{mode: rdma.ModeExclusive, pods: map[string][]rdmares.Entry{
		"/run/netns/x": {{Kind: rdmares.MR, Device: "mlx5_1", ID: 3, PID: 40, MRBytes: 1 << 20}}}}
	c := NewUsageCollector(f, func() []conflist.Network { return []conflist.Network{{Name: "rdmanet", DataDir: dir}} }, true)
	want := `# HELP rdma_chain_pod_rdma_mr_bytes Bytes the processes of attached pods have registered as RDMA memory regions, by device.
# TYPE rdma_chain_pod_rdma_mr_bytes gauge
rdma_chain_pod_rdma_mr_bytes{device="mlx5_1",namespace="default",pod="x"} 1.048576e+06
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rdma_chain_pod_rdma_mr_bytes"); err != nil {
		t.Error(err)
	}
}

// TestUsageCardinality checks that series exist only for attached pods.
// 200 pods attach, each holding objects, and the scrape has 5 series per
// pod (4 object types and MR bytes on its one device) besides the node's
// unattributed ones; after each pod's DEL (its record removed) none of its
// series is left, while its processes still hold their objects (counted
// other_pod, by device and type only).
func TestUsageCardinality(t *testing.T) {
	f, dir, nets := sharedUsage(t)
	c := NewUsageCollector(f, func() []conflist.Network { return nets }, true)
	base := testutil.CollectAndCount(c)
	const pods = 200
	for i := range pods {
		pid := uint32(1000 + i)
		putRecords(t, dir, usagePod(fmt.Sprintf("p%d", i), uint64(pid)*10))
		f.host = append(f.host, rdmares.Entry{Kind: rdmares.QP, Device: "rxe0", ID: pid, PID: pid},
			rdmares.Entry{Kind: rdmares.MR, Device: "rxe0", ID: pid, PID: pid, MRBytes: 64})
	}
	if n := testutil.CollectAndCount(c); n != base+5*pods {
		t.Fatalf("%d series with %d more pods, want %d", n, pods, base+5*pods)
	}
	for i := range pods {
		if err := state.New(dir).Delete(state.Key{Network: "rdmanet", ContainerID: fmt.Sprintf("p%d", i), IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	n := testutil.CollectAndCount(c)
	left := testutil.CollectAndCount(c, "rdma_chain_rdma_objects_unattributed")
	if n != base+1 || left != 5 {
		// one more unattributed series: rxe0's other_pod MRs
		t.Errorf("%d series (%d unattributed) after every DEL, want %d (5)", n, left, base+1)
	}
	if _, ok := valueOf(t, c, "rdma_chain_pod_rdma_objects", map[string]string{"device": "rxe0", "namespace": "default", "pod": "p0", "type": "qp"}); ok {
		t.Error("a deleted pod's series is still there")
	}
}

// valueOf is the value of c's series name with exactly labels, and
// whether c has it.
func valueOf(t *testing.T, c prometheus.Collector, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	all := make(chan prometheus.Metric, 10000)
	c.Collect(all)
	close(all)
	for m := range all {
		if !strings.Contains(m.Desc().String(), `fqName: "`+name+`"`) {
			continue
		}
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range d.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if maps.Equal(got, labels) {
			return d.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestUsageDocs checks that docs/operations.md lists every usage
// metric.
func TestUsageDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 10)
	NewUsageCollector(&fakeUsage{}, func() []conflist.Network { return nil }, false).Describe(ch)
	close(ch)
	for d := range ch {
		n := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/operations.md does not list metric %s", n)
		}
	}
}
