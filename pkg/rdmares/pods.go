package rdmares

import (
	"fmt"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Reader is what ReadPods reads: the kernel (Kernel) or a fake in unit
// tests.
type Reader interface {
	NetnsMode() (rdma.Mode, error)
	// Resources dumps the tracked objects of the devices the netns at
	// nsPath sees ("": the caller's, the host's).
	Resources(nsPath string) ([]Entry, error)
	// PodOf is the UID of the pod whose cgroup a process of the caller's
	// pid namespace is in, "" for none.
	PodOf(pid uint32) (string, error)
	// LiveNetns is the inode of rec's netns while the netns it recorded
	// is there; 0 when it is gone or another netns is at its path.
	LiveNetns(rec *state.Record) (uint64, error)
}

// Pod is what the processes of one attached pod hold.
type Pod struct {
	// Record is the pod's first record with RDMA links whose netns lives
	// (a pod with two attachments has one UID, and one Pod).
	Record *state.Record
	// Usage is per device: every device of the record's links (zero when
	// unused) and any other device the pod's processes use.
	Usage map[string]Usage
}

// Report is ReadPods' answer.
type Report struct {
	Pods         []Pod
	Unattributed map[Unattributed]int
	// Errors are the reads that failed; what they would have shown is
	// missing (a pod's objects then count on no pod, or not at all).
	Errors []error
}

// ReadPods reads the usage of the pods of recs: the records with RDMA
// links and a pod UID whose recorded netns lives. It dumps the host's
// devices and, in exclusive mode, those of each pod netns that holds one,
// and gives each object to the pod whose cgroup its owner is in (by the
// UID kubelet names the cgroup after, Reader.PodOf). A record without a
// UID (a runtime that passed no K8S_POD_UID) has no usage. holdsDevice
// says whether an exclusive-mode record has moved a device into its pod.
func ReadPods(k Reader, recs []*state.Record, holdsDevice func(*state.Record) bool) Report {
	var rep Report
	fail := func(format string, a ...any) { rep.Errors = append(rep.Errors, fmt.Errorf(format, a...)) }
	seen := map[string]bool{}
	for _, r := range recs {
		if len(r.Links) == 0 || r.Pod.UID == "" || seen[r.Pod.UID] {
			continue
		}
		ino, err := k.LiveNetns(r)
		if err != nil {
			fail("netns of %s/%s: %w", r.Network, r.ContainerID, err)
		}
		if ino == 0 {
			continue
		}
		seen[r.Pod.UID] = true
		rep.Pods = append(rep.Pods, Pod{Record: r})
	}
	entries, err := k.Resources("")
	if err != nil {
		fail("RDMA resources of the host netns: %w", err)
	}
	mode, err := k.NetnsMode()
	if err != nil {
		fail("RDMA netns mode: %w", err)
	}
	for _, p := range rep.Pods {
		if mode != rdma.ModeExclusive || !holdsDevice(p.Record) {
			continue
		}
		es, err := k.Resources(p.Record.NetNS)
		if err != nil {
			fail("RDMA resources of netns %s: %w", p.Record.NetNS, err)
		}
		entries = append(entries, es...)
	}
	tally := Attribute(entries, k.PodOf)
	for i := range rep.Pods {
		u := tally.Take(rep.Pods[i].Record.Pod.UID)
		for _, l := range rep.Pods[i].Record.Links {
			if _, ok := u[l.Device]; !ok {
				u[l.Device] = Usage{}
			}
		}
		rep.Pods[i].Usage = u
	}
	tally.Rest()
	rep.Unattributed = tally.Unattributed
	return rep
}

// Kernel is the Reader of the node the caller runs on, in its pid
// namespace: the host's for reconcile (the DaemonSet's hostPID) and for
// inspect run on the node.
type Kernel struct{ sys *rdma.System }

// NewKernel reads the kernel of the calling netns.
func NewKernel() Kernel { return Kernel{sys: rdma.New()} }

// NetnsMode is the RDMA subsystem's netns mode.
func (k Kernel) NetnsMode() (rdma.Mode, error) { return k.sys.NetnsMode() }

// Resources is Dump.
func (Kernel) Resources(nsPath string) ([]Entry, error) { return Dump(nsPath) }

// PodOf is ProcPodUID.
func (Kernel) PodOf(pid uint32) (string, error) { return ProcPodUID(pid) }

// LiveNetns identifies the netns at rec's path (netnsid.Of) and compares it
// with the recorded one (state.Record.NetnsGone).
func (Kernel) LiveNetns(rec *state.Record) (uint64, error) {
	gone, err := rec.NetnsGone(netnsid.Of)
	if err != nil || gone {
		return 0, err
	}
	if rec.NetNSIno != 0 {
		return rec.NetNSIno, nil
	}
	id, err := netnsid.Of(rec.NetNS)
	return id.Inode, err
}
