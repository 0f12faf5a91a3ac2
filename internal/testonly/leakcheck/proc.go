package leakcheck

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// childPids lists the processes whose parent is this one, with their stat.
func childPids() (map[int]stat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	out := map[int]stat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		st, err := readStat(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // it exited while the list was read
		}
		if err != nil {
			return nil, err
		}
		if st.ppid == self {
			out[pid] = st
		}
	}
	return out, nil
}

// children lists the live child processes as "process PID (COMM)".
func children() (map[string]bool, error) {
	pids, err := childPids()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for pid, st := range pids {
		if st.state != "Z" {
			out[fmt.Sprintf("process %d (%s)", pid, st.comm)] = true
		}
	}
	return out, nil
}

// reapZombies waits for the children that exited: as subreaper this
// process inherits the orphans of its tests, and nobody else waits for
// them. Each is waited for by pid, after the tests, so no exec.Cmd's Wait
// loses its status.
func reapZombies() {
	pids, err := childPids()
	if err != nil {
		return
	}
	for pid, st := range pids {
		if st.state == "Z" {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// killChildren kills the live children the check reported, so that a
// failed run leaves no process running either.
func killChildren() {
	pids, err := childPids()
	if err != nil {
		return
	}
	for pid, st := range pids {
		if st.state != "Z" {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
