//go:build containerd

package containerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// cniProc is a running CNI plugin process: its PID, the plugin, the verb
// (CNI_COMMAND) and the container (CNI_CONTAINERID).
type cniProc struct {
	pid                     int
	plugin, verb, container string
	logging                 bool // it held the plugin's log file open
	held                    bool // the test held it stopped across the runtime's death
}

func (p cniProc) String() string {
	s := fmt.Sprintf("%s %s of %.12s (pid %d)", p.plugin, p.verb, p.container, p.pid)
	if p.logging {
		s += " logging"
	}
	return s
}

// holdsFile reports whether process pid has path open.
func holdsFile(pid int, path string) bool {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			return true
		}
	}
	return false
}

// cniProcs is which of pids are live plugins run from bin (argv[0] in it,
// as the runtime and ptp exec them); a zombie has no argv and is not.
func cniProcs(bin string, pids []int) []cniProc {
	var out []cniProc
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		if err != nil || filepath.Dir(argv0) != bin {
			continue
		}
		p := cniProc{pid: pid, plugin: filepath.Base(argv0)}
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		for _, kv := range strings.Split(string(environ), "\x00") {
			if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
				p.verb = v
			} else if v, ok := strings.CutPrefix(kv, "CNI_CONTAINERID="); ok {
				p.container = v
			}
		}
		out = append(out, p)
	}
	return out
}

// reapedByRuntime is how reap says a process ended before the runtime
// died: the runtime waited for it, so it is no child of this test binary.
const reapedByRuntime = "reaped by the runtime"

// reap waits for each of procs, which a dead runtime left to this test
// binary (leakcheck makes it their subreaper), and says how each ended:
// "exit N" or "signal S", or reapedByRuntime (ECHILD), which a process
// held stopped across the runtime's death cannot be.
func reap(t *testing.T, procs []cniProc) map[cniProc]string {
	t.Helper()
	ended := map[cniProc]string{}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		for _, p := range procs {
			if _, ok := ended[p]; ok {
				continue
			}
			var ws unix.WaitStatus
			switch pid, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); {
			case errors.Is(err, unix.ECHILD) && !p.held:
				ended[p] = reapedByRuntime
			case err != nil:
				ended[p] = "unknown: " + err.Error()
			case pid == p.pid && ws.Signaled():
				ended[p] = "signal " + ws.Signal().String()
			case pid == p.pid:
				ended[p] = fmt.Sprintf("exit %d", ws.ExitStatus())
			}
		}
		return len(ended) == len(procs), fmt.Sprintf("ended so far: %v of %v", ended, procs)
	})
	return ended
}

// procState is the state letter of pid (/proc/PID/stat), 0 if it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// childPIDs are the children of pid, each of its threads' (the kernel's
// /proc/PID/task/TID/children).
func childPIDs(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// allPIDs are the machine's processes.
func allPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// mountsUnder lists the mount points of this mount namespace under dir.
func mountsUnder(t interface{ Fatal(...any) }, dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// callTimeout is a deadline for one CRI call made outside the test's
// goroutine.
func (e *env) callTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}
