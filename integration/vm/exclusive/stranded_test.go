package exclusive

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestStrandedExclusive is the stranded-exclusive scenario (the boot of
// multi-exclusive: four NICs with simrdma0..simrdma3, exclusive mode).
// Two pods hold a device each; their netns outlive their pins (a process
// holds each), so the kernel keeps their devices there. Then three ADDs at
// once: each plugin's ADD ends inside the node lock's 10 s (no "locked" 11; each
// ADD's time and the timeout are logged as the scenario's figure): the
// two free devices go to two of them, the third is 11 naming the holders.
// inspect reports both stranded attachments; the free devices stay
// usable after their pods' DEL; once the holders let go, their late DELs
// give everything back.
func TestStrandedExclusive(t *testing.T) {
	testenv.VMGuest(t)
	nics := multiNICList()
	if !guestkit.Check(t, "switch-to-exclusive", exclusiveMode) || !guestkit.Check(t, "four-devices", func() error { return fourDevices(nics) }) {
		t.FailNow()
	}
	c := guestkit.NewCalls(t, "1.0.0", "/run/rdma-chain-stranded")
	c.Conf(t, `"mode":"exclusive","podSelection":"all","devices":["simrdma0","simrdma1","simrdma2","simrdma3"],"dataDir":"`+c.DataDir+`"`)
	var holders []*os.File
	defer func() {
		for _, h := range holders {
			h.Close()
		}
	}()
	held := []guestkit.Pod{guestkit.NewPod("stranded-", "held-a"), guestkit.NewPod("stranded-", "held-b")}
	for _, p := range held {
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			t.FailNow()
		}
		h, err := os.Open(p.NetNS)
		if !guestkit.Check(t, "hold-"+p.Name, func() error { return err }) {
			t.FailNow()
		}
		holders = append(holders, h)
		guestkit.DelNetNS(t, p)
	}
	views(t, "stranded-before")

	fresh := []guestkit.Pod{guestkit.NewPod("stranded-", "new-0"), guestkit.NewPod("stranded-", "new-1"), guestkit.NewPod("stranded-", "new-2")}
	runs := addAtOnce(t, c, fresh)
	var ok, later []guestkit.Pod
	guestkit.Check(t, "three-adds-end", func() error {
		var bad []error
		for i, r := range runs {
			switch te, isCNI := guestkit.CNIError(r.err); {
			case r.err == nil:
				ok = append(ok, fresh[i])
			case isCNI && te.Code == 11 && strings.Contains(te.Msg, "attached to another pod"):
				later = append(later, fresh[i])
			default:
				bad = append(bad, fmt.Errorf("ADD %s after %v: %w", fresh[i].Name, r.wall, r.err))
			}
		}
		if len(ok) != 2 || len(later) != 1 {
			bad = append(bad, fmt.Errorf("%d attached and %d told to try again, want 2 and 1", len(ok), len(later)))
		}
		return errors.Join(bad...)
	})
	guestkit.Check(t, "inside-lock-timeout", func() error { return insideLockTimeout(t, runs) })
	in := guestkit.RunOps(t, "inspect-stranded", nil, "inspect", "--data-dir", c.DataDir)
	guestkit.Check(t, "inspect-reports-stranded", func() error {
		if n := strings.Count(in.Output(), "stranded since"); n != len(held) {
			return fmt.Errorf("inspect names %d stranded attachments, want %d", n, len(held))
		}
		return in.Exit(1)
	})
	for _, p := range ok {
		guestkit.ExpectOK(t, "del-"+p.Name, c.Gone(t, p))
	}
	again := guestkit.NewPod("stranded-", "again")
	guestkit.ExpectOK(t, "free-device-usable", c.Add(t, again))
	guestkit.ExpectOK(t, "del-again", c.Gone(t, again))

	for _, h := range holders {
		h.Close()
	}
	holders = nil
	for _, p := range held {
		guestkit.Check(t, "late-del-"+p.Name, func() error {
			return guestkit.Poll(30*time.Second, 200*time.Millisecond, func() error { return c.Del(t, p) })
		})
	}
	for _, p := range later {
		guestkit.DelNetNS(t, p)
	}
	guestkit.Check(t, "no-records-left", func() error { return c.RecordCount(0) })
	guestkit.Check(t, "four-back-in-init-net", func() error {
		return guestkit.Poll(20*time.Second, 200*time.Millisecond, func() error {
			var errs []error
			for _, n := range nics {
				errs = append(errs, guestkit.BoundTo(n.dev, n.eth))
			}
			return errors.Join(errs...)
		})
	})
}

// addRun is one ADD of addAtOnce: the chain's time (the primary's ADD
// and the plugin's), the plugin's log (its own time is there) and the
// chain's error.
type addRun struct {
	wall time.Duration
	log  []byte
	err  error
}

// addAtOnce runs the runtime's ADD of each pod at once, each through its
// own chain, and returns each one's run, by pod.
func addAtOnce(t *testing.T, c *guestkit.Calls, pods []guestkit.Pod) []addRun {
	runs := make([]addRun, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		guestkit.NetNS(t, p)
		wg.Go(func() {
			ch := guestkit.NewChain(guestkit.BinDir)
			start := time.Now()
			runs[i].err = ch.Add(c.List, p)
			runs[i].wall = time.Since(start).Round(time.Millisecond)
			runs[i].log = ch.Stderr
		})
	}
	wg.Wait()
	for i, p := range pods {
		t.Logf("ADD %s: %v, %v\n%s", p.Name, runs[i].wall, runs[i].err, runs[i].log)
	}
	return runs
}

// insideLockTimeout checks that each plugin's own ADD (from its start,
// both waits for the node lock in it) ended inside the node lock's
// timeout. The figure logged is each ADD's own time and the chain's,
// against that timeout.
func insideLockTimeout(t *testing.T, runs []addRun) error {
	var errs []error
	var own, wall []string
	for i, r := range runs {
		d, err := pluginADD(r.log)
		if err == nil && d >= chain.DefaultLockTimeout {
			err = fmt.Errorf("ADD %d took %v, not inside the node lock's timeout %v", i, d, chain.DefaultLockTimeout)
		}
		errs = append(errs, err)
		own, wall = append(own, d.Round(time.Millisecond).String()), append(wall, r.wall.String())
	}
	t.Logf("three ADDs at once beside two stranded holders: the plugin's %s (the chain's %s), the node lock's timeout %v, a stranded device's wait %v",
		strings.Join(own, ", "), strings.Join(wall, ", "), chain.DefaultLockTimeout, rdma.DefaultHostWait)
	return errors.Join(errs...)
}

// pluginADD is the plugin's own ADD duration in its log: the duration of
// its msg=done or msg=failed line (log/slog's text form) of verb ADD.
func pluginADD(log []byte) (time.Duration, error) {
	for _, line := range strings.Split(string(log), "\n") {
		f := strings.Fields(line)
		if !slices.Contains(f, "verb=ADD") || !slices.Contains(f, "msg=done") && !slices.Contains(f, "msg=failed") {
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "duration="); ok {
				return time.ParseDuration(v)
			}
		}
	}
	return 0, fmt.Errorf("no ADD duration in the plugin's log: %q", log)
}
