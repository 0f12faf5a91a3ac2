package chain

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestDelAfterCrashMidAdd checks that a plugin killed in the middle of ADD
// leaves a record whose step says how far it got; the runtime's DEL undoes
// exactly that much.
func TestDelAfterCrashMidAdd(t *testing.T) {
	cases := []struct {
		name string
		link state.Link
		want []string
	}{
		{"before the netdev moved", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0"}, Step: state.StepPlanned}, nil},
		{"host identity recorded, move under way", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}, Step: state.StepNetdevMoving},
			[]string{"RestoreToHost eth1 /var/run/netns/pod"}},
		{"RDMA move under way", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}, RDMAMoved: true, Step: state.StepNetdevMoved},
			[]string{"ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
		{"netdev moved, RDMA device not yet", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}, Step: state.StepNetdevMoved},
			[]string{"RestoreToHost eth1 /var/run/netns/pod"}},
		{"both moved", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}, RDMAMoved: true, Step: state.StepDone},
			[]string{"ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
		{"child being created", state.Link{Device: "rxe0", Kind: state.LinkIPVlan, HostLink: state.HostLink{HostName: "veth0", PodName: "rdma0"}, Step: state.StepChildAdding},
			[]string{"DelChild /var/run/netns/pod rdma0 "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { delAfterCrash(t, tc.link, "", tc.want) })
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

// delAfterCrash records link as a killed ADD left it, runs DEL with the conf
// suffix extra, and checks the world's calls and that no state is left.
func delAfterCrash(t *testing.T, link state.Link, extra string, want []string) {
	t.Helper()
	dir := t.TempDir()
	rec := &state.Record{Network: "rdmanet", ContainerID: "c1", IfName: "eth0", NetNS: "/var/run/netns/pod", Links: []state.Link{link}}
	if err := state.New(dir).Put(rec); err != nil {
		t.Fatal(err)
	}
	w := &world{}
	if err := w.plugin().Del(cmd(dir, extra, "")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.calls, want) {
		t.Errorf("calls %v, want %v", w.calls, want)
	}
	if f := stateFiles(t, dir); len(f) != 0 {
		t.Errorf("state left: %v", f)
	}
}
