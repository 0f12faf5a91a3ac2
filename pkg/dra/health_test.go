package dra

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func TestTaints(t *testing.T) {
	down := resourceapi.DeviceTaint{Key: TaintPortDown, Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	full := resourceapi.DeviceTaint{Key: TaintGIDTableFull, Effect: resourceapi.DeviceTaintEffectNoSchedule}
	for _, tc := range []struct {
		name string
		nic  NIC
		mode rdma.Mode
		want []resourceapi.DeviceTaint
	}{
		{"active", NIC{PortState: "ACTIVE"}, rdma.ModeShared, nil},
		{"active defer", NIC{PortState: "ACTIVE_DEFER"}, rdma.ModeShared, nil},
		{"down", NIC{PortState: "DOWN"}, rdma.ModeShared, []resourceapi.DeviceTaint{down}},
		{"state not read", NIC{}, rdma.ModeShared, nil},
		{"state no label value", NIC{PortState: "NOT A LABEL"}, rdma.ModeShared,
			[]resourceapi.DeviceTaint{{Key: TaintPortDown, Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
		{"full, shared", NIC{PortState: "ACTIVE", GIDTableFull: true}, rdma.ModeShared, []resourceapi.DeviceTaint{full}},
		{"full, exclusive", NIC{PortState: "ACTIVE", GIDTableFull: true}, rdma.ModeExclusive, nil},
		{"down and full", NIC{PortState: "DOWN", GIDTableFull: true}, rdma.ModeShared, []resourceapi.DeviceTaint{down, full}},
		{"in a pod", NIC{PortState: "DOWN", InPod: true}, rdma.ModeExclusive, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := taints(tc.nic, tc.mode); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("taints %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDevicesTainted checks the taints discovery leads to: a port read
// DOWN, and a GID table whose every row holds a GID (none is the zero GID).
func TestDevicesTainted(t *testing.T) {
	s := testSysfs(t)
	for i := range 4 {
		s.write("class/infiniband/mlx5_0/ports/1/gids/"+itoa(i), "fe80:0000:0000:0000:ba59:9fff:fed4:6a8"+itoa(i))
	}
	_, node := discover(t, s, "shared", nil)
	got := map[string][]string{}
	for _, d := range Devices(node) {
		for _, tn := range d.Taints {
			got[d.Name] = append(got[d.Name], taintString(tn))
		}
	}
	want := map[string][]string{
		"erdma-0": {TaintPortDown + "=DOWN:NoSchedule"},
		"mlx5-0":  {TaintGIDTableFull + ":NoSchedule"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
}

func TestHealthEvents(t *testing.T) {
	dev := func(name string, ts ...resourceapi.DeviceTaint) resourceapi.Device {
		rdmaName, netdev := strings.ReplaceAll(name, "-", "_"), "eth"+name[len(name)-1:]
		return resourceapi.Device{Name: name, Taints: ts, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrRDMADevice: str(rdmaName), AttrNetdev: str(netdev)}}
	}
	down := resourceapi.DeviceTaint{Key: TaintPortDown, Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	full := resourceapi.DeviceTaint{Key: TaintGIDTableFull, Effect: resourceapi.DeviceTaintEffectNoSchedule}
	initState := resourceapi.DeviceTaint{Key: TaintPortDown, Value: "INIT", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	for _, tc := range []struct {
		name        string
		before, now []resourceapi.Device
		skipped     map[string]string
		want        []string
	}{
		{"first publish, healthy", nil, []resourceapi.Device{dev("sim-1")}, nil, nil},
		{"first publish, a taint", nil, []resourceapi.Device{dev("sim-1", down)}, nil,
			[]string{"Warning RDMADeviceUnhealthy [Taint sim-1 " + TaintPortDown + "=DOWN:NoSchedule] sim_1 (eth1): port 1 down: tainted " + TaintPortDown + "=DOWN:NoSchedule"}},
		{"no change", []resourceapi.Device{dev("sim-1", down)}, []resourceapi.Device{dev("sim-1", down)}, nil, nil},
		{"port down", []resourceapi.Device{dev("sim-1")}, []resourceapi.Device{dev("sim-1", down)}, nil,
			[]string{"Warning RDMADeviceUnhealthy [Taint sim-1 " + TaintPortDown + "=DOWN:NoSchedule] sim_1 (eth1): port 1 down: tainted " + TaintPortDown + "=DOWN:NoSchedule"}},
		{"port up", []resourceapi.Device{dev("sim-1", down)}, []resourceapi.Device{dev("sim-1")}, nil,
			[]string{"Normal RDMADeviceHealthy [Untaint sim-1 " + TaintPortDown + "] sim_1 (eth1): taint " + TaintPortDown + " removed"}},
		{"table full", []resourceapi.Device{dev("sim-1", down)}, []resourceapi.Device{dev("sim-1", down, full)}, nil,
			[]string{"Warning RDMADeviceUnhealthy [Taint sim-1 " + TaintGIDTableFull + ":NoSchedule] sim_1 (eth1): port 1's GID table has no room for a pod's 2 rows: tainted " + TaintGIDTableFull + ":NoSchedule"}},
		{"port state changed", []resourceapi.Device{dev("sim-1", down)}, []resourceapi.Device{dev("sim-1", initState)}, nil,
			[]string{"Warning RDMADeviceUnhealthy [Taint sim-1 " + TaintPortDown + "=INIT:NoSchedule] sim_1 (eth1): port 1 init: tainted " + TaintPortDown + "=INIT:NoSchedule"}},
		{"gone", []resourceapi.Device{dev("sim-1"), dev("sim-2")}, []resourceapi.Device{dev("sim-2")}, nil,
			[]string{"Warning RDMADeviceUnpublished [Unpublish sim-1 gone from the node] sim_1 (eth1): no longer published: gone from the node"}},
		{"skipped", []resourceapi.Device{dev("sim-1")}, nil, map[string]string{"sim_1": "not offered by the node's rdma-chain entries"},
			[]string{"Warning RDMADeviceUnpublished [Unpublish sim-1 not offered by the node's rdma-chain entries] sim_1 (eth1): no longer published: not offered by the node's rdma-chain entries"}},
		{"new, tainted", []resourceapi.Device{}, []resourceapi.Device{dev("sim-3", down)}, nil,
			[]string{"Normal RDMADevicePublished [Publish sim-3] sim_3 (eth3): published",
				"Warning RDMADeviceUnhealthy [Taint sim-3 " + TaintPortDown + "=DOWN:NoSchedule] sim_3 (eth3): port 1 down: tainted " + TaintPortDown + "=DOWN:NoSchedule"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range healthEvents(tc.before, tc.now, tc.skipped) {
				got = append(got, e.Type+" "+e.Reason+" ["+e.Action+"] "+e.Note)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("events\n%q, want\n%q", got, tc.want)
			}
		})
	}
}

func TestAction(t *testing.T) {
	for _, tc := range []struct {
		name  string
		words []string
		want  string
	}{
		{"short", []string{"Taint", "sim-1", "k=v:NoSchedule"}, "Taint sim-1 k=v:NoSchedule"},
		{"cut", []string{"Unpublish", strings.Repeat("d", 63), strings.Repeat("w", 100)}, "Unpublish " + strings.Repeat("d", 63) + " " + strings.Repeat("w", 54)},
		{"cut on a character", []string{strings.Repeat("a", 127) + "é"}, strings.Repeat("a", 127)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := action(tc.words...); got != tc.want || len(got) > maxAction {
				t.Errorf("action %q (%d bytes), want %q", got, len(got), tc.want)
			}
		})
	}
}

// TestHealthEventsWithinLimits checks that a long reason for a device's
// leaving gives an Event the API takes: its action and note cut.
func TestHealthEventsWithinLimits(t *testing.T) {
	why := strings.Repeat("w", 2000)
	evs := healthEvents([]resourceapi.Device{{Name: "sim-1"}}, nil, map[string]string{"sim-1": why})
	if len(evs) != 1 || len(evs[0].Action) > maxAction || len(evs[0].Note) > maxNote || !strings.HasPrefix(evs[0].Note, "sim-1: no longer published: www") {
		t.Errorf("events %+v", evs)
	}
}

// eventLog is an events.EventRecorder that keeps each Event as
// "REGARDING [RELATED] TYPE REASON NOTE".
type eventLog []string

func (l *eventLog) Eventf(regarding, related runtime.Object, eventtype, reason, _, note string, args ...any) {
	name := func(o runtime.Object) string {
		r := o.(*corev1.ObjectReference)
		return strings.Join(slices.DeleteFunc([]string{r.Kind, r.Namespace, r.Name}, func(s string) bool { return s == "" }), "/") + "(" + string(r.UID) + ")"
	}
	rel := "-"
	if related != nil {
		rel = name(related)
	}
	*l = append(*l, name(regarding)+" "+rel+" "+eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

// TestReportPods checks that each change is recorded on the Node, and on
// each pod of a live record whose links hold the device, once per pod.
func TestReportPods(t *testing.T) {
	down := resourceapi.DeviceTaint{Key: TaintPortDown, Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	healthy := []resourceapi.Device{{Name: "sim-1"}}
	tainted := []resourceapi.Device{{Name: "sim-1", Taints: []resourceapi.DeviceTaint{down}}}
	rec := func(ns, name string, devs ...string) *state.Record {
		r := &state.Record{Pod: state.Pod{Namespace: ns, Name: name, UID: "u-" + name}}
		for _, d := range devs {
			r.Links = append(r.Links, state.Link{Device: d})
		}
		return r
	}
	stranded := rec("ns", "gone", "sim-1")
	stranded.StrandedAt = time.Unix(1, 0)
	const (
		node     = "Node/node-b(node-b)"
		downNote = " Warning RDMADeviceUnhealthy sim-1: port 1 down: tainted " + TaintPortDown + "=DOWN:NoSchedule"
	)
	for _, tc := range []struct {
		name        string
		before, now []resourceapi.Device
		recs        []*state.Record
		err         error
		want        []string
	}{
		{"no pod", healthy, tainted, nil, nil, []string{node + " -" + downNote}},
		{"holders", healthy, tainted, []*state.Record{rec("ns", "a", "sim-1"), rec("ns", "b", "sim-2"), rec("other", "c", "sim-2", "sim-1")}, nil,
			[]string{node + " -" + downNote, "Pod/ns/a(u-a) " + node + downNote, "Pod/other/c(u-c) " + node + downNote}},
		{"two links of one device", healthy, tainted, []*state.Record{rec("ns", "a", "sim-1", "sim-1")}, nil,
			[]string{node + " -" + downNote, "Pod/ns/a(u-a) " + node + downNote}},
		{"stranded or unnamed", healthy, tainted, []*state.Record{stranded, rec("", "", "sim-1"), rec("ns", "", "sim-1")}, nil,
			[]string{node + " -" + downNote}},
		{"some unreadable", healthy, tainted, []*state.Record{rec("ns", "a", "sim-1")}, errors.New("1 record unreadable"),
			[]string{node + " -" + downNote, "Pod/ns/a(u-a) " + node + downNote}},
		{"healthy again", tainted, healthy, []*state.Record{rec("ns", "a", "sim-1")}, nil,
			[]string{node + " - Normal RDMADeviceHealthy sim-1: taint " + TaintPortDown + " removed",
				"Pod/ns/a(u-a) " + node + " Normal RDMADeviceHealthy sim-1: taint " + TaintPortDown + " removed"}},
		{"gone", healthy, nil, []*state.Record{rec("ns", "a", "sim-1")}, nil,
			[]string{node + " - Warning RDMADeviceUnpublished sim-1: no longer published: gone from the node",
				"Pod/ns/a(u-a) " + node + " Warning RDMADeviceUnpublished sim-1: no longer published: gone from the node"}},
		{"published, not to pods", []resourceapi.Device{}, healthy, []*state.Record{rec("ns", "a", "sim-1")}, nil,
			[]string{node + " - Normal RDMADevicePublished sim-1: published"}},
		{"no change, no read", healthy, healthy, nil, errors.New("not read"), nil},
		{"first publish, node only", nil, tainted, []*state.Record{rec("ns", "a", "sim-1")}, nil, []string{node + " -" + downNote}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got eventLog
			read := 0
			e := &nodeEvents{rec: &got, node: &corev1.ObjectReference{Kind: "Node", Name: "node-b", UID: "node-b"},
				records: func() ([]*state.Record, error) { read++; return tc.recs, tc.err }, log: slog.New(slog.DiscardHandler)}
			e.report(tc.before, tc.now, nil)
			if !reflect.DeepEqual([]string(got), tc.want) {
				t.Errorf("events\n%q, want\n%q", got, tc.want)
			}
			if (tc.want == nil || tc.before == nil) && read != 0 {
				t.Errorf("records read %d times for no change or the first publish", read)
			}
		})
	}
}

// TestReportSoftRoCEPods checks that a soft-RoCE NIC's health change is
// told to the pods whose links hold an rxe device of their own on it.
func TestReportSoftRoCEPods(t *testing.T) {
	nic := func(taints ...resourceapi.DeviceTaint) []resourceapi.Device {
		return []resourceapi.Device{{Name: "softroce-eth2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrNetdev: str("eth2")},
			Taints: taints}}
	}
	down := resourceapi.DeviceTaint{Key: TaintPortDown, Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	rec := func(name, parent string, soft bool) *state.Record {
		return &state.Record{Pod: state.Pod{Namespace: "ns", Name: name, UID: "u-" + name}, Links: []state.Link{
			{Device: rdma.SoftRoCEName("net", name, "eth0"), SoftRoCE: soft, HostLink: state.HostLink{HostName: parent, PodName: "rdma0"}}}}
	}
	var got eventLog
	e := &nodeEvents{rec: &got, node: &corev1.ObjectReference{Kind: "Node", Name: "node-b", UID: "node-b"}, log: slog.New(slog.DiscardHandler),
		records: func() ([]*state.Record, error) {
			return []*state.Record{rec("a", "eth2", true), rec("b", "eth3", true), rec("c", "eth2", false)}, nil
		}}
	e.report(nic(), nic(down), nil)
	note := " Warning RDMADeviceUnhealthy softroce-eth2 (eth2): port 1 down: tainted " + TaintPortDown + "=DOWN:NoSchedule"
	want := []string{"Node/node-b(node-b) -" + note, "Pod/ns/a(u-a) Node/node-b(node-b)" + note}
	if !reflect.DeepEqual([]string(got), want) {
		t.Errorf("events\n%q, want\n%q", got, want)
	}
}
