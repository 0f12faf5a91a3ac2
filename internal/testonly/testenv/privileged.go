package testenv

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// PrivilegedEnv names the variable that selects the privileged (netns)
// tier: make test-netns sets it to 1.
const PrivilegedEnv = "RC_PRIVILEGED"

// privilegedCaps are the capabilities a privileged case uses:
// CAP_NET_ADMIN for netns, netdevs and routes, CAP_SYS_ADMIN for setns,
// mounts and bpf.
var privilegedCaps = []struct {
	bit  uint
	name string
}{{12, "CAP_NET_ADMIN"}, {21, "CAP_SYS_ADMIN"}}

// Privileged gates a case of the privileged tier, which changes this
// machine's kernel state (netns, netdevs, bpffs): it runs only when
// RC_PRIVILEGED=1, and skips, as a case of another tier, otherwise. With
// the variable set, a process that is not root or lacks a capability the
// tier uses fails the case: the tier was asked for and cannot run.
func Privileged(t testing.TB) {
	t.Helper()
	if os.Getenv(PrivilegedEnv) != "1" {
		t.Skipf("privileged tier: runs with %s=1 (make test-netns)", PrivilegedEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but euid %d: the privileged tier needs root", PrivilegedEnv, os.Geteuid())
	}
	eff, err := effectiveCaps()
	if err != nil {
		t.Fatalf("%s=1 but the capabilities cannot be read: %v", PrivilegedEnv, err)
	}
	for _, c := range privilegedCaps {
		if eff&(1<<c.bit) == 0 {
			t.Fatalf("%s=1 but the process lacks %s: the privileged tier cannot run", PrivilegedEnv, c.name)
		}
	}
}

// effectiveCaps reads CapEff of /proc/self/status.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, os.ErrNotExist
}
