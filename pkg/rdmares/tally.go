package rdmares

import (
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sys/unix"
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

// Why an object is counted on no netns.
const (
	KernelOwned = "kernel"      // the kernel owns it
	NoPID       = "no_pid"      // the dump named no owner: it has exited, or it is outside the caller's pid namespace
	Unreadable  = "unreadable"  // the owner's netns could not be read
	OtherNetns  = "other_netns" // its owner's netns is none the caller asked for (Tally.Take)
)

// Unattributed keys the objects counted on no netns.
type Unattributed struct {
	Device string
	Kind   Kind
	Reason string // KernelOwned, NoPID, Unreadable or OtherNetns
}

// Tally is a dump's objects summed per netns of their owners and device,
// and the objects that are no netns's.
type Tally struct {
	netns        map[uint64]map[string]*Usage // netns inode -> device -> usage
	Unattributed map[Unattributed]int
}

// NetnsOf gives the inode of the netns of a process of the caller's pid
// namespace.
type NetnsOf func(pid uint32) (uint64, error)

// Attribute sums entries per netns of their owners, read once per pid
// through netnsOf.
func Attribute(entries []Entry, netnsOf NetnsOf) Tally {
	t := Tally{netns: map[uint64]map[string]*Usage{}, Unattributed: map[Unattributed]int{}}
	type owner struct {
		ino uint64
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
			o.ino, o.err = netnsOf(e.PID)
			owners[e.PID] = o
		}
		if why == "" && o.err != nil {
			why = Unreadable
		}
		if why != "" {
			t.Unattributed[Unattributed{e.Device, e.Kind, why}]++
			continue
		}
		devs := t.netns[o.ino]
		if devs == nil {
			devs = map[string]*Usage{}
			t.netns[o.ino] = devs
		}
		if devs[e.Device] == nil {
			devs[e.Device] = &Usage{}
		}
		devs[e.Device].add(e)
	}
	return t
}

// Take returns what the processes of the netns with inode ino hold, per
// device, and removes it from t. Calling it twice for one inode gives
// nothing the second time.
func (t *Tally) Take(ino uint64) map[string]Usage {
	out := map[string]Usage{}
	for dev, u := range t.netns[ino] {
		out[dev] = *u
	}
	delete(t.netns, ino)
	return out
}

// Rest counts what no Take took as OtherNetns and removes it.
func (t *Tally) Rest() {
	for _, ino := range slices.Sorted(maps.Keys(t.netns)) {
		for dev, u := range t.netns[ino] {
			for _, k := range Kinds {
				if n := u.Count(k); n > 0 {
					t.Unattributed[Unattributed{dev, k, OtherNetns}] += n
				}
			}
		}
		delete(t.netns, ino)
	}
}

// ProcNetns reads the netns inode of process pid of the caller's pid
// namespace from /proc/PID/ns/net. The kernel allows it for a process of
// the caller's uid, or with CAP_SYS_PTRACE; a process that has exited
// gives an error wrapping os.ErrNotExist.
func ProcNetns(pid uint32) (uint64, error) {
	var st unix.Stat_t
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}
