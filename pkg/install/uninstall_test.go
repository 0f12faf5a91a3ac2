package install

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestUninstallReleasesHookFirst checks that the socket hook's hold goes
// before the entry, so a release that fails leaves the entry (draining)
// for a second uninstall to find the directory again; an entry --force
// cannot read has its default directory's hold released.
func TestUninstallReleasesHookFirst(t *testing.T) {
	const primary = `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"}]}`
	entry := func(dataDir, extra string) string {
		return `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","mode":"shared","devices":["eth9"],"dataDir":"` +
			dataDir + `"` + extra + `}]}`
	}
	for _, tc := range []struct {
		name     string
		extra    string
		force    bool
		failures int      // releases that fail before one succeeds
		dirs     []string // directories released, in order
		runs     int      // uninstall runs until the entry is gone
		says     string   // in the last run's output
		unlocked bool     // released without the entry's node lock (unreadable entry)
	}{
		{name: "released, then the entry", extra: `,"smcr":{"bpffsDir":"/sys/fs/bpf/x"}`, dirs: []string{"/sys/fs/bpf/x"}, runs: 1,
			says: "SMC socket hook released"},
		{name: "a failed release keeps the entry", extra: `,"smcr":{"bpffsDir":"/sys/fs/bpf/x"}`, failures: 1,
			dirs: []string{"/sys/fs/bpf/x", "/sys/fs/bpf/x"}, runs: 2, says: "SMC socket hook released"},
		{name: "--force on an unreadable entry", extra: `,"smcr":{"transparent":"sometimes"}`, force: true,
			dirs: []string{config.DefaultBPFFSDir}, runs: 1, says: "SMC socket hook released", unlocked: true},
		{name: "--force goes on when the release fails", extra: `,"smcr":{"bpffsDir":"/sys/fs/bpf/x"}`, force: true, failures: 1,
			dirs: []string{"/sys/fs/bpf/x"}, runs: 1, says: "--force: SMC socket hook: bpf: permission denied: it stays held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := t.TempDir()
			path := filepath.Join(conf, "10-ptp.conflist")
			dataDir := t.TempDir()
			if err := os.WriteFile(path, []byte(entry(dataDir, tc.extra)), 0o644); err != nil {
				t.Fatal(err)
			}
			var dirs []string
			failures := tc.failures
			o := UninstallOptions{Conflist: path, Force: tc.force, ReleaseHook: func(dir string) (bool, error) {
				dirs = append(dirs, dir)
				// A plugin call would wait: the release runs under the node lock.
				if unlock, err := state.New(dataDir).Lock(0); err == nil {
					unlock()
					if !tc.unlocked {
						t.Errorf("released %s without the node lock of %s", dir, dataDir)
					}
				} else if !errors.Is(err, state.ErrLockTimeout) || tc.unlocked {
					t.Errorf("node lock of %s during the release: %v", dataDir, err)
				}
				if failures > 0 {
					failures--
					return true, errors.New("bpf: permission denied")
				}
				return true, nil
			}}
			for run := 1; ; run++ {
				var out bytes.Buffer
				err := Uninstall(context.Background(), o, &out)
				data, _ := os.ReadFile(path)
				if run < tc.runs {
					if err == nil || !strings.Contains(err.Error(), "permission denied") {
						t.Fatalf("run %d: %v, want the release's error", run, err)
					}
					if !strings.Contains(strings.ReplaceAll(string(data), " ", ""), `"drain":true`) {
						t.Fatalf("run %d: the entry is not left draining:\n%s", run, data)
					}
					continue
				}
				if err != nil {
					t.Fatalf("run %d: %v\n%s", run, err, out.String())
				}
				if string(data) != primary {
					t.Errorf("conflist after run %d:\n%s\nwant\n%s", run, data, primary)
				}
				if !strings.Contains(out.String(), tc.says) {
					t.Errorf("output does not say %q:\n%s", tc.says, out.String())
				}
				break
			}
			if !slices.Equal(dirs, tc.dirs) {
				t.Errorf("released %q, want %q", dirs, tc.dirs)
			}
		})
	}
}
