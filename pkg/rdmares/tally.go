package rdmares

import (
	"maps"
	"slices"
)

// Usage is what the processes of one netns hold on one device.
type Usage struct {
	QP, CQ, MR, PD int
	MRBytes        uint64   // the MRs' registered bytes
	PIDs           []uint32 // the owners, ascending, each once
}

// Count is the number of objects of kind k.
func (u Usage) Count(k Kind) int {
	switch k {
	case QP:
		return u.QP
	case CQ:
		return u.CQ
	case MR:
		return u.MR
	case PD:
		return u.PD
	}
	return 0
}

func (u *Usage) add(e Entry) {
	switch e.Kind {
	case QP:
		u.QP++
	case CQ:
		u.CQ++
	case MR:
		u.MR++
		u.MRBytes += e.MRBytes
	case PD:
		u.PD++
	}
	if i, found := slices.BinarySearch(u.PIDs, e.PID); !found {
		u.PIDs = slices.Insert(u.PIDs, i, e.PID)
	}
}

// Why an object is counted on no pod.
const (
	KernelOwned = "kernel"     // the kernel owns it
	NoPID       = "no_pid"     // the dump named no owner: it has exited, or it is outside the caller's pid namespace
	Unreadable  = "unreadable" // the owner's cgroup could not be read: it has exited since the dump, or its cgroup list is malformed
	NoPod       = "no_pod"     // the owner is in no pod's cgroup: a host process
	OtherPod    = "other_pod"  // the owner's pod is none the caller asked for (Tally.Take): no live attachment
)

// Unattributed keys the objects counted on no pod.
type Unattributed struct {
	Device string
	Kind   Kind
	Reason string // KernelOwned, NoPID, Unreadable, NoPod or OtherPod
}

// Tally is a dump's objects summed per pod of their owners and device,
// and the objects that are no pod's.
type Tally struct {
	pods         map[string]map[string]*Usage // pod UID -> device -> usage
	Unattributed map[Unattributed]int
}

// PodOf gives the UID of the pod whose cgroup a process of the caller's
// pid namespace is in, "" for none (ProcPodUID).
type PodOf func(pid uint32) (string, error)

// Attribute sums entries per pod of their owners, read once per pid
// through podOf.
func Attribute(entries []Entry, podOf PodOf) Tally {
	t := Tally{pods: map[string]map[string]*Usage{}, Unattributed: map[Unattributed]int{}}
	type owner struct {
		uid string
		err error
	}
	owners := map[uint32]owner{}
	for _, e := range entries {
		why := ""
		switch {
		case e.Kernel():
			why = KernelOwned
		case e.PID == 0:
			why = NoPID
		}
		o, seen := owners[e.PID]
		if why == "" && !seen {
			o.uid, o.err = podOf(e.PID)
			owners[e.PID] = o
		}
		switch {
		case why != "":
		case o.err != nil:
			why = Unreadable
		case o.uid == "":
			why = NoPod
		}
		if why != "" {
			t.Unattributed[Unattributed{e.Device, e.Kind, why}]++
			continue
		}
		devs := t.pods[o.uid]
		if devs == nil {
			devs = map[string]*Usage{}
			t.pods[o.uid] = devs
		}
		if devs[e.Device] == nil {
			devs[e.Device] = &Usage{}
		}
		devs[e.Device].add(e)
	}
	return t
}

// Take returns what the processes of the pod with UID uid hold, per
// device, and removes it from t. Calling it twice for one UID gives
// nothing the second time.
func (t *Tally) Take(uid string) map[string]Usage {
	out := map[string]Usage{}
	for dev, u := range t.pods[uid] {
		out[dev] = *u
	}
	delete(t.pods, uid)
	return out
}

// Rest counts what no Take took as OtherPod and removes it.
func (t *Tally) Rest() {
	for _, uid := range slices.Sorted(maps.Keys(t.pods)) {
		for dev, u := range t.pods[uid] {
			for _, k := range Kinds {
				if n := u.Count(k); n > 0 {
					t.Unattributed[Unattributed{dev, k, OtherPod}] += n
				}
			}
		}
		delete(t.pods, uid)
	}
}
