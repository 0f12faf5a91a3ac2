package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/syncbuf"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// TestConfWatchSettlesUnderSteadyWrites checks that a file of the conf
// dir written every 50 ms, more often than the watch's settle time,
// still gets the change reported while the writes go on, not only once
// they stop.
func TestConfWatchSettlesUnderSteadyWrites(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 1)
	watchConfDirs(ctx, []string{dir}, changed, slog.New(slog.DiscardHandler))
	var writing atomic.Bool
	writing.Store(true)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer writing.Store(false)
		deadline := time.Now().Add(5 * confSettleMax)
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := os.WriteFile(filepath.Join(dir, "10-agent.conflist"), fmt.Appendf(nil, "%d", i), 0o644); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	<-changed
	stillWriting := writing.Load()
	close(stop)
	<-done // the writer ends before t and its temporary dir do
	if !stillWriting {
		t.Errorf("the change was reported only once the writes stopped (%v of writes every 50 ms)", 5*confSettleMax)
	}
}

// agentRewritesFor is how long the fake agent of
// TestEnsureEntryAgentRewritesConstantly writes (RC_AGENT_REWRITES_FOR, a
// Go duration, for a shorter or longer run).
func agentRewritesFor(t *testing.T) time.Duration {
	v := os.Getenv("RC_AGENT_REWRITES_FOR")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("RC_AGENT_REWRITES_FOR: %v", err)
	}
	return d
}

// TestEnsureEntryAgentRewritesConstantly has an agent rename a new version
// of its conflist, without the entry, over the old one every 100 ms while
// reconcile's loop watches the conf dir, and checks that no version of the
// agent is ever replaced by an older one (the entry goes into the version
// it was read from, or nothing is written), the entries put back are fewer
// than the agent's writes (the restores back off), the entry is back once
// the agent stops, it came back while the agent wrote, and the CPU time of
// the run is printed.
func TestEnsureEntryAgentRewritesConstantly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-calico.conflist")
	version := func(gen int) []byte {
		return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico","gen":%d}]}`, gen)
	}
	write := func(gen int) {
		tmp := filepath.Join(dir, ".agent.tmp")
		if err := os.WriteFile(tmp, version(gen), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	var loadOut syncbuf.Buffer
	r, _ := runEnsuringLoop(t, dir, &loadOut)

	cpuBefore := cpuTime(t)
	writes, lost, entryBack := 1, 0, 0
	for deadline := time.Now().Add(agentRewritesFor(t)); time.Now().Before(deadline); writes++ {
		time.Sleep(100 * time.Millisecond)
		gen, hasEntry := readVersion(t, path)
		if gen != writes-1 {
			lost++
			t.Errorf("the agent's version %d was replaced by version %d", writes-1, gen)
		}
		if hasEntry && gen > 0 {
			entryBack++ // not the first pass's
		}
		write(writes)
	}
	last := writes - 1
	for wait := time.Now().Add(restoreWaitMax); ; time.Sleep(20 * time.Millisecond) {
		if gen, hasEntry := readVersion(t, path); hasEntry && gen == last {
			break
		} else if gen != last || time.Now().After(wait) {
			t.Fatalf("after the agent's last version %d: version %d, entry %v", last, gen, hasEntry)
		}
	}
	cpu := cpuTime(t) - cpuBefore
	restores := testutil.ToFloat64(r.metrics.ConflistRestores)
	backoffs := testutil.ToFloat64(r.metrics.ConflistRestoreBackoffs)
	t.Logf("agent writes %d, versions lost %d, entry back before the next write %d, entries put back %v, backoffs %v, process CPU %v (%v per agent write)",
		writes, lost, entryBack, restores, backoffs, cpu, cpu/time.Duration(writes))
	if restores > float64(writes) || restores < 2 {
		t.Errorf("entries put back %v for %d agent writes", restores, writes)
	}
	if writes > 100 && entryBack == 0 {
		t.Errorf("the entry never came back while the agent wrote (%d writes)", writes)
	}
	if writes > 100 && backoffs == 0 {
		t.Errorf("no backoff after %d agent writes and %v restores", writes, restores)
	}
	if want := "msg=\"another agent keeps rewriting the conflist without the rdma-chain entry: the next restore waits\" conflist=" + path; backoffs > 0 && !strings.Contains(loadOut.String(), want) {
		t.Errorf("no log line naming the conflist:\n%s", loadOut.String())
	}
}

// readVersion returns the agent's version in the conflist at path and
// whether the rdma-chain entry is there.
func readVersion(t *testing.T, path string) (int, bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Plugins []struct {
			Type string
			Gen  int
		}
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	gen, entry := -1, false
	for _, p := range list.Plugins {
		switch p.Type {
		case "calico":
			gen = p.Gen
		case conflist.PluginType:
			entry = true
		}
	}
	return gen, entry
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
