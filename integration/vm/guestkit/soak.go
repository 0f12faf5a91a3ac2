package guestkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// Status is the runtime's STATUS of the list (cniVersion 1.1.0): the
// node's readiness as a runtime asks for it every few seconds.
func (c *Chain) Status(list *libcni.NetworkConfigList) error {
	ctx, cancel := timeout()
	defer cancel()
	return c.cni.GetStatusNetworkList(ctx, list)
}

// InstallPlugin puts build as PluginName in dir, as the DaemonSet
// replaces it (a copy renamed over the one there), beside links to
// refDir's ptp, host-local and loopback: a CNI_PATH of its own, so the
// guest's /opt/cni/bin keeps the ordinary build for the other scenarios
// of the boot.
func InstallPlugin(dir, build, refDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(build)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+PluginName+".tmp")
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, PluginName)); err != nil {
		return err
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		dst := filepath.Join(dir, p)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(refDir, p), dst); err != nil {
			return err
		}
	}
	return nil
}

// WriteConflist writes list as dir/NAME.conflist, for a process that
// reads the conflist from disk (rdma-chain-ops), and returns its path.
func WriteConflist(dir string, list *libcni.NetworkConfigList) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, list.Name+".conflist")
	return path, os.WriteFile(path, list.Bytes, 0o644)
}

// ProcUsage reads process pid's resident memory (VmRSS, in kB) and how
// many files it holds open: what a long-running agent must not grow.
func ProcUsage(pid int) (rssKB, fds int, err error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("process %d: %w", pid, err)
	}
	rssKB = -1
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if rssKB, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); err != nil {
				return 0, 0, fmt.Errorf("VmRSS of process %d: %q: %w", pid, l, err)
			}
		}
	}
	if rssKB < 0 {
		return 0, 0, fmt.Errorf("process %d: no VmRSS in its status (a zombie?)", pid)
	}
	es, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return 0, 0, fmt.Errorf("open files of process %d: %w", pid, err)
	}
	return rssKB, len(es), nil
}

// Percentile is the p-th percentile of ds by nearest rank (the smallest
// value at least p% of them do not exceed); false when ds is empty.
func Percentile(ds []time.Duration, p int) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100 // ceil(n*p/100), the rank counted from 1
	return s[max(i, 1)-1], true
}
