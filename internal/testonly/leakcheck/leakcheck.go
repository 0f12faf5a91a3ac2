package leakcheck

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// grace is how long Main polls for what the tests made to go: the kernel
// destroys a netns, and the links whose peers were in it, after the last
// reference goes, and a killed process takes a moment to exit.
var grace = 15 * time.Second

// Main runs m's tests, then cleanups (a package's own TestMain teardown),
// then the check, and exits. A binary that changes the host in
// RC_PRIVILEGED=1 cases only is checked host-wide in that tier.
func Main(m *testing.M, cleanups ...func()) {
	os.Exit(run(m, hostWanted(false), cleanups))
}

// MainHost is Main for a tier that changes the host without RC_PRIVILEGED
// (a containerd the tests start): the host-wide check runs whenever the
// binary runs as root.
func MainHost(m *testing.M, cleanups ...func()) {
	os.Exit(run(m, hostWanted(true), cleanups))
}

// hostWanted reports whether this binary's tests can change the host.
func hostWanted(always bool) bool {
	if os.Geteuid() != 0 {
		return false
	}
	return always || os.Getenv(testenv.PrivilegedEnv) == "1"
}

// run is Main's body: it returns the exit code instead of exiting.
func run(m *testing.M, host bool, cleanups []func()) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: become subreaper: %v\n", err)
		return 1
	}
	if host {
		release, err := hostTurn(os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
			return 1
		}
		defer release()
		host = release != nil
	}
	before, err := take(host)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: before the tests: %v\n", err)
		return 1
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	left, err := leftAfter(before, host, grace)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: after the tests: %v\n", err)
		return 1
	}
	if len(left) == 0 {
		return code
	}
	report(os.Stderr, left)
	killChildren()
	return 1
}

// leftAfter polls until the machine holds nothing that before lacks, or
// wait passes; it returns what is left, one line each.
func leftAfter(before snapshot, host bool, wait time.Duration) ([]string, error) {
	deadline := time.Now().Add(wait)
	for {
		reapZombies()
		now, err := take(host)
		if err != nil {
			return nil, err
		}
		left := now.minus(before)
		if len(left) == 0 || time.Now().After(deadline) {
			return left, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// report prints what the tests left behind.
func report(w io.Writer, left []string) {
	say.Printf(w, "leakcheck: FAIL: %d left behind by the tests:\n", len(left))
	for _, l := range left {
		say.Printf(w, "leakcheck:   %s\n", l)
	}
}

// snapshot is what the check compares, each set keyed by a line that
// names the thing.
type snapshot struct {
	children map[string]bool // "process PID (COMM)"
	host     map[string]bool // netns pins, links and mounts
}

// take reads the machine: the children always, the host when host is set.
func take(host bool) (snapshot, error) {
	s := snapshot{host: map[string]bool{}}
	var err error
	if s.children, err = children(); err != nil {
		return s, err
	}
	if !host {
		return s, nil
	}
	for _, read := range []func() ([]string, error){netnsPins, hostLinks, mounts} {
		lines, err := read()
		if err != nil {
			return s, err
		}
		for _, l := range lines {
			s.host[l] = true
		}
	}
	return s, nil
}

// minus lists, sorted, what s holds and before does not.
func (s snapshot) minus(before snapshot) []string {
	var out []string
	for _, pair := range [][2]map[string]bool{{s.children, before.children}, {s.host, before.host}} {
		for k := range pair[0] {
			if !pair[1][k] {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// trimmed is s without surrounding spaces and newlines.
func trimmed(b []byte) string { return strings.TrimSpace(string(b)) }
