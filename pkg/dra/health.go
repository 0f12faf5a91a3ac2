package dra

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Taint keys of the driver's devices in its slice, each NoSchedule: the
// scheduler allocates a tainted device to no new claim that does not
// tolerate the taint, and claims allocated before keep it. No condition
// evicts (NoExecute): a port that went down mostly comes back (a link
// flap, a switch's reboot) and its pods' RDMA with it, while their TCP
// goes through the primary all along, so evicting would turn a flap into
// a restart of every RDMA pod of the port; a full GID table hurts only the
// next pod. An admin who wants eviction writes a DeviceTaintRule.
const (
	TaintPortDown     = DriverName + "/port-down"
	TaintGIDTableFull = DriverName + "/gid-table-full"
)

// taints are n's health as device taints: port 1 read in a state other
// than ACTIVE (the taint's value), and in shared mode a GID table read
// without room for one more pod's address. A device an exclusive-mode pod
// holds gets none (its facts are from when the host saw it), nor does one
// whose state or table could not be read: a fault not seen is no fault
// seen, and the portState attribute says what was read.
func taints(n NIC, mode rdma.Mode) []resourceapi.DeviceTaint {
	if n.InPod {
		return nil
	}
	var out []resourceapi.DeviceTaint
	if n.PortState != "" && n.PortState != "ACTIVE" && n.PortState != "ACTIVE_DEFER" {
		value := n.PortState
		if len(validation.IsValidLabelValue(value)) > 0 {
			value = ""
		}
		out = append(out, resourceapi.DeviceTaint{Key: TaintPortDown, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if mode == rdma.ModeShared && n.GIDTableFull {
		out = append(out, resourceapi.DeviceTaint{Key: TaintGIDTableFull, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return out
}

// healthEvent is one Kubernetes Event on the node about its devices.
// Action names the device and what changed (the taint with its value, why
// it left the slice): client-go folds Events of one regarding object,
// reason and action into one series whatever their notes say, and each
// change is an Event of its own.
type healthEvent struct {
	Type   string // corev1.EventTypeNormal or EventTypeWarning
	Reason string
	Action string
	Note   string
	Device string // the RDMA device it is about; a soft-RoCE NIC's DRA name
}

// Reasons of the driver's Events on its node.
const (
	ReasonUnhealthy   = "RDMADeviceUnhealthy"
	ReasonHealthy     = "RDMADeviceHealthy"
	ReasonUnpublished = "RDMADeviceUnpublished"
	ReasonPublished   = "RDMADevicePublished"
)

// healthEvents are the Events of the change from the devices published
// before to those published now: a taint added or its value changed
// (Warning) or a taint removed, a device no longer published (Warning,
// with skipped's reason when it has one, else gone from the node) or
// published anew. At the first publish (before nil) they are the taints
// it holds.
func healthEvents(before, now []resourceapi.Device, skipped map[string]string) []healthEvent {
	var out []healthEvent
	old := map[string]resourceapi.Device{}
	for _, d := range before {
		old[d.Name] = d
	}
	for _, d := range now {
		b, ok := old[d.Name]
		delete(old, d.Name)
		if !ok && before != nil {
			out = append(out, healthEvent{corev1.EventTypeNormal, ReasonPublished, action("Publish", d.Name), deviceName(d) + ": published", rdmaName(d)})
		}
		for _, t := range d.Taints {
			if !slices.ContainsFunc(b.Taints, func(o resourceapi.DeviceTaint) bool { return o.Key == t.Key && o.Value == t.Value }) {
				out = append(out, healthEvent{corev1.EventTypeWarning, ReasonUnhealthy, action("Taint", d.Name, taintString(t)),
					fmt.Sprintf("%s: %s: tainted %s", deviceName(d), taintCause(d, t), taintString(t)), rdmaName(d)})
			}
		}
		for _, t := range b.Taints {
			if !slices.ContainsFunc(d.Taints, func(n resourceapi.DeviceTaint) bool { return n.Key == t.Key }) {
				out = append(out, healthEvent{corev1.EventTypeNormal, ReasonHealthy, action("Untaint", d.Name, t.Key),
					fmt.Sprintf("%s: taint %s removed", deviceName(d), t.Key), rdmaName(d)})
			}
		}
	}
	gone := make([]string, 0, len(old))
	for name := range old {
		gone = append(gone, name)
	}
	slices.Sort(gone)
	for _, name := range gone {
		d := old[name]
		why := "gone from the node"
		if s := skipped[rdmaName(d)]; s != "" {
			why = s
		}
		out = append(out, healthEvent{corev1.EventTypeWarning, ReasonUnpublished, action("Unpublish", d.Name, why),
			cut(deviceName(d)+": no longer published: "+why, maxNote), rdmaName(d)})
	}
	return out
}

// The Events API's limits on an Event's action and note, in bytes.
const (
	maxAction = 128
	maxNote   = 1024
)

// action is an Event's action: the words joined, cut to maxAction bytes.
func action(words ...string) string { return cut(strings.Join(words, " "), maxAction) }

// cut shortens s to at most n bytes on a character's boundary.
func cut(s string, n int) string {
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

func taintString(t resourceapi.DeviceTaint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// taintCause says what taint t of d stands for: a soft-RoCE NIC's port is
// its netdev (its operstate).
func taintCause(d resourceapi.Device, t resourceapi.DeviceTaint) string {
	switch t.Key {
	case TaintPortDown:
		if a, ok := d.Attributes[AttrSoftRoCE]; ok && a.BoolValue != nil && *a.BoolValue {
			return "netdev not up"
		}
		if t.Value == "" {
			return "port 1 not active"
		}
		return "port 1 " + strings.ToLower(t.Value)
	case TaintGIDTableFull:
		return fmt.Sprintf("port 1's GID table has no room for a pod's %d rows", rdma.GIDsPerAddress)
	}
	return t.Key
}

// rdmaName is a published device's RDMA device name (its attribute).
func rdmaName(d resourceapi.Device) string {
	if a, ok := d.Attributes[AttrRDMADevice]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return d.Name
}

// deviceName names a published device in an Event: its RDMA device and
// netdev.
func deviceName(d resourceapi.Device) string {
	if a, ok := d.Attributes[AttrNetdev]; ok && a.StringValue != nil {
		return rdmaName(d) + " (" + *a.StringValue + ")"
	}
	return rdmaName(d)
}

// nodeEvents records the driver's Events on its Node, and on the pods
// that hold the device each is about; it logs each.
type nodeEvents struct {
	rec     events.EventRecorder
	node    *corev1.ObjectReference
	records func() ([]*state.Record, error) // the CNI plugin's attachments
	log     *slog.Logger
}

// startNodeEvents starts sending node's Events through client
// (events.k8s.io/v1) until ctx ends; stop flushes and ends it. The pods
// holding a device are those of records.
func startNodeEvents(ctx context.Context, client kubernetes.Interface, node string, records func() ([]*state.Record, error),
	log *slog.Logger) (e *nodeEvents, stop func()) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		log.Warn("no Events on the node: its devices' health is logged only", "error", err)
	}
	// A Node's UID in an Event is its name, as kubelet's own.
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
	return &nodeEvents{rec: b.NewRecorder(scheme.Scheme, "rdma-chain-dra"), node: ref, records: records, log: log}, b.Shutdown
}

// report records the Events of the change from before to now: each on the
// Node, and each but a publish on every pod holding its device too, with
// the Node as the related object. At the first publish (before nil) the
// taints the node has are told to the Node only: a driver's restart (a
// rollout, a reboot) changes nothing for the pods.
func (e *nodeEvents) report(before, now []resourceapi.Device, skipped map[string]string) {
	evs := healthEvents(before, now, skipped)
	if len(evs) == 0 {
		return
	}
	var holders map[string][]*corev1.ObjectReference
	if before != nil {
		holders = e.holders()
	}
	for _, ev := range evs {
		pods := holders[ev.Device]
		if ev.Reason == ReasonPublished {
			pods = nil
		}
		e.log.Info("device health changed", "reason", ev.Reason, "note", ev.Note, "podEvents", len(pods))
		e.rec.Eventf(e.node, nil, ev.Type, ev.Reason, ev.Action, "%s", ev.Note)
		for _, pod := range pods {
			e.rec.Eventf(pod, e.node, ev.Type, ev.Reason, ev.Action, "%s", ev.Note)
		}
	}
}

// holders are the pods of the readable records by the RDMA devices their
// links hold, each pod once per device; a link's own soft-RoCE device
// counts as its NIC's, by the NIC's DRA name, which the published device
// is named by. A record without its pod's name (not from kubelet) or
// stranded (its pod gone) names none.
func (e *nodeEvents) holders() map[string][]*corev1.ObjectReference {
	if e.records == nil {
		return nil
	}
	recs, err := e.records()
	if err != nil {
		e.log.Warn("some attachment records unreadable: their pods get no device Events", "error", err)
	}
	out := map[string][]*corev1.ObjectReference{}
	for _, r := range recs {
		if r.Pod.Namespace == "" || r.Pod.Name == "" || !r.StrandedAt.IsZero() {
			continue
		}
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.Pod.Namespace, Name: r.Pod.Name, UID: types.UID(r.Pod.UID)}
		for _, l := range r.Links {
			dev := l.Device
			if l.SoftRoCE {
				dev = rdma.SoftRoCEDRAName(l.HostName)
			}
			if dev != "" && !slices.ContainsFunc(out[dev], func(o *corev1.ObjectReference) bool { return *o == *ref }) {
				out[dev] = append(out[dev], ref)
			}
		}
	}
	return out
}
