// Command privexec runs a program with the privileges a container runtime
// would give it: in a cgroup, optionally in a cgroup namespace of its own
// rooted there, under a uid and gid, and with only the capabilities named
// (in its bounding, permitted, effective, inheritable and ambient sets; a
// uid 0 program gets exactly them at exec). The VM tier's ops-usage runs
// the DaemonSet's reconcile with its two capabilities and a pod's process
// under another uid in a kubelet-named pod cgroup:
//
//	privexec [-cgroup DIR] [-cgroupns] [-uid N] [-gid N] [-caps cap,cap] -- PROG [ARG...]
//
// The busybox setpriv of the guest cannot change the uid or the bounding
// set. Exit status: PROG's, 1 when a step fails, 2 on usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capNames are the capabilities -caps may name.
var capNames = map[string]uint{"net_admin": unix.CAP_NET_ADMIN, "sys_admin": unix.CAP_SYS_ADMIN,
	"sys_ptrace": unix.CAP_SYS_PTRACE, "net_raw": unix.CAP_NET_RAW, "ipc_lock": unix.CAP_IPC_LOCK}

type opts struct {
	cgroup   string
	cgroupNS bool
	uid, gid int
	keep     uint64 // capability mask
	argv     []string
}

func main() {
	// credentials and capabilities are per thread: every step and the
	// exec run on this one
	runtime.LockOSThread()
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "privexec: %v\nusage: privexec [-cgroup DIR] [-cgroupns] [-uid N] [-gid N] [-caps cap,cap] -- PROG [ARG...]\n", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "privexec: %v\n", err)
		os.Exit(1)
	}
}

func parse(args []string) (opts, error) {
	fs := flag.NewFlagSet("privexec", flag.ContinueOnError)
	var o opts
	var caps string
	fs.StringVar(&o.cgroup, "cgroup", "", "cgroup v2 directory to move into first")
	fs.BoolVar(&o.cgroupNS, "cgroupns", false, "a new cgroup namespace, rooted at the cgroup")
	fs.IntVar(&o.uid, "uid", -1, "uid (all of real, effective, saved)")
	fs.IntVar(&o.gid, "gid", -1, "gid, and no supplementary groups")
	fs.StringVar(&caps, "caps", "", "the only capabilities kept, comma-separated (lower case, no CAP_)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.argv = fs.Args(); len(o.argv) == 0 {
		return o, errors.New("no program")
	}
	for _, c := range strings.Split(caps, ",") {
		if c == "" {
			continue
		}
		n, ok := capNames[c]
		if !ok {
			return o, fmt.Errorf("unknown capability %q", c)
		}
		o.keep |= 1 << n
	}
	return o, nil
}

func run(o opts) error {
	path, err := exec.LookPath(o.argv[0])
	if err != nil {
		return err
	}
	if o.cgroup != "" {
		if err := os.WriteFile(o.cgroup+"/cgroup.procs", []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	if o.cgroupNS {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fmt.Errorf("unshare cgroup namespace: %w", err)
		}
	}
	if err := dropBounding(o.keep); err != nil {
		return err
	}
	if err := setIDs(o.uid, o.gid); err != nil {
		return err
	}
	if err := setCaps(o.keep); err != nil {
		return err
	}
	return unix.Exec(path, o.argv, os.Environ())
}

// dropBounding drops every capability but keep from the bounding set.
func dropBounding(keep uint64) error {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("cap_last_cap: %w", err)
	}
	for c := 0; c <= last; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// setIDs sets the gid (without supplementary groups) and the uid of this
// thread, keeping its permitted capabilities for setCaps.
func setIDs(uid, gid int) error {
	if uid < 0 && gid < 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities: %w", err)
	}
	if gid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("setresgid %d: %w", gid, e)
		}
	}
	if uid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return fmt.Errorf("setresuid %d: %w", uid, e)
		}
	}
	return nil
}

// setCaps makes keep this thread's effective, permitted, inheritable and
// ambient capabilities.
func setCaps(keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	lo, hi := uint32(keep), uint32(keep>>32)
	data := [2]unix.CapUserData{{Effective: lo, Permitted: lo, Inheritable: lo}, {Effective: hi, Permitted: hi, Inheritable: hi}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := range 64 {
		if keep&(1<<c) == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("raise ambient capability %d: %w", c, err)
		}
	}
	return nil
}
