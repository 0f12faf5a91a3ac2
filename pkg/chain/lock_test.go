package chain

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestLockBounded checks that a held node lock is waited for only so long;
// then the runtime is told to try again.
func TestLockBounded(t *testing.T) {
	dir := t.TempDir()
	w, _ := added(t, dir, "c1")
	unlock, err := state.New(dir).Lock(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	start := time.Now()
	p := w.plugin()
	p.env.LockTimeout = 100 * time.Millisecond
	wantCode(t, p.Del(cmd(dir, `,"podSelection":"all"`, "")), types.ErrTryAgainLater, "locked")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("DEL waited %v", d)
	}
}

// TestConcurrentAdds checks that concurrent ADDs serialise on the node
// lock: in exclusive mode exactly one pod gets the device and the others
// are told to try again; in shared mode every pod gets its child and its
// own record.
func TestConcurrentAdds(t *testing.T) {
	for _, mode := range []rdma.Mode{rdma.ModeExclusive, rdma.ModeShared} {
		t.Run(string(mode), func(t *testing.T) {
			const pods = 8
			dir := t.TempDir()
			w := &world{mode: mode, devices: []rdma.Device{rxe("mlx5_0", "eth1")}}
			p := w.plugin()
			errs := make([]error, pods)
			var wg sync.WaitGroup
			for i := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					args := cmd(dir, `,"podSelection":"all"`, prevResult100)
					args.ContainerID = fmt.Sprintf("c%d", i)
					errs[i] = p.Add(args)
				}()
			}
			wg.Wait()
			ok, busy := 0, 0
			for _, err := range errs {
				var te *types.Error
				switch {
				case err == nil:
					ok++
				case errors.As(err, &te) && te.Code == types.ErrTryAgainLater:
					busy++
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
			wantOK := pods
			if mode == rdma.ModeExclusive {
				wantOK = 1
			}
			if ok != wantOK || ok+busy != pods || len(stateFiles(t, dir)) != wantOK {
				t.Errorf("ok %d busy %d records %d, want %d ok", ok, busy, len(stateFiles(t, dir)), wantOK)
			}
		})
	}
}

// TestRecordNamingOwnNetns checks that a record that names the plugin's
// own netns as the pod's is never acted on: DEL and GC quarantine it and
// succeed.
func TestRecordNamingOwnNetns(t *testing.T) {
	for _, verb := range []string{"DEL", "GC"} {
		dir := t.TempDir()
		rec := &state.Record{Network: "rdmanet", ContainerID: "c1", IfName: "eth0", NetNS: "/proc/1/ns/net", Mode: rdma.ModeShared,
			Links: []state.Link{{Device: "rxe0", Kind: state.LinkMACVlan, Step: state.StepDone}}}
		rec.Links[0].HostName, rec.Links[0].PodName = "eth0", "eth0"
		if err := state.New(dir).Put(rec); err != nil {
			t.Fatal(err)
		}
		w := &world{}
		args := cmd(dir, "", "")
		args.Netns = ""
		var err error
		if verb == "DEL" {
			err = w.plugin().Del(args)
		} else {
			err = w.plugin().GC(args)
		}
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if len(w.calls) != 0 || len(stateFiles(t, dir)) != 0 {
			t.Errorf("%s: calls %v, records %v", verb, w.calls, stateFiles(t, dir))
		}
	}
}
