package reconcile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rdma-chain/rdma-chain/pkg/cri"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestPassReleasesListedSandboxWithReplacedNetns checks that a sandbox CRI
// still lists is released only on proof that its pod died (its netns path
// opens on another netns than recorded: another inode, or the same inode
// with another cookie), with reason netns_gone. One whose path names no
// netns here (a plain file on tmpfs, as a mount without propagation shows
// a new pin; nothing at all) or cannot be read is kept, a problem of every
// pass, said and counted once.
func TestPassReleasesListedSandboxWithReplacedNetns(t *testing.T) {
	plain := filepath.Join(tmpfsDir(t), "cni-plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := newFakeNode(t,
		rec("rdmanet", "replaced", "/run/netns/replaced", time.Hour),
		rec("rdmanet", "reused-inode", "/run/netns/reused-inode", time.Hour),
		rec("rdmanet", "live", "/run/netns/live", time.Hour),
		rec("rdmanet", "plain-file", plain, time.Hour),
		rec("rdmanet", "missing", "/run/netns/missing", time.Hour),
		rec("rdmanet", "unreadable", "/run/netns/broken", time.Hour),
		rec("rdmanet", "nonetns", "", time.Hour),
	)
	n.ids["/run/netns/replaced"] = netnsid.ID{Inode: recordedNetns.Inode + 1, Cookie: 9}
	n.ids["/run/netns/reused-inode"] = netnsid.ID{Inode: recordedNetns.Inode, Cookie: recordedNetns.Cookie + 1}
	n.gone["/run/netns/missing"] = true
	for _, id := range []string{"replaced", "reused-inode", "live", "plain-file", "missing", "unreadable", "nonetns"} {
		n.sandboxes = append(n.sandboxes, cri.Sandbox{ID: id})
	}
	r := n.reconciler("/run/cri.sock")
	for pass := 1; pass <= 2; pass++ {
		err := r.passErr(context.Background())
		if problems := testutil.ToFloat64(r.metrics.Problems); problems != 3 || !errors.Is(err, ErrProblems) {
			t.Errorf("pass %d: rdma_chain_reconcile_problems %v (%v), want 3 (plain file, missing, unreadable)\n%s", pass, problems, err, n.out.String())
		}
	}
	slices.Sort(n.deleted)
	if want := []string{"replaced", "reused-inode"}; !slices.Equal(n.deleted, want) {
		t.Errorf("released %v, want %v\n%s", n.deleted, want, n.out.String())
	}
	if got := testutil.ToFloat64(r.metrics.Releases.WithLabelValues("rdmanet", metrics.ReasonNetnsGone)); got != 2 {
		t.Errorf("%v netns_gone releases, want 2", got)
	}
	for reason, want := range map[string]float64{metrics.UnverifiedNetnsUnseen: 2, metrics.UnverifiedNetnsUnreadable: 1} {
		if got := testutil.ToFloat64(r.metrics.Unverified.WithLabelValues("rdmanet", reason)); got != want {
			t.Errorf("unverified %s = %v, want %v (once per attachment)", reason, got, want)
		}
	}
	out := n.out.String()
	if got := strings.Count(out, `msg="kept an attachment CRI lists`); got != 3 {
		t.Errorf("said %d times that an attachment is kept unverified, want 3 (once each)\n%s", got, out)
	}
	for _, want := range []string{
		`msg="released an attachment" attachment="rdmanet/replaced/eth0 (pod default/pod-replaced, shared, ipvlan rxe0)" why="netns /run/netns/replaced names another netns while CRI still lists the sandbox"`,
		`attachment="rdmanet/plain-file/eth0 (pod default/pod-plain-file, shared, ipvlan rxe0)" netns=` + plain + ` reason=netns_unseen`,
		`attachment="rdmanet/unreadable/eth0 (pod default/pod-unreadable, shared, ipvlan rxe0)" netns=/run/netns/broken reason=netns_unreadable error="permission denied"`,
		`msg="pass done" released=0 kept=5 problems=3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// tmpfsDir is a directory on tmpfs (/dev/shm), where a runtime's netns
// pins live, or the test's own when the machine has none.
func tmpfsDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "reconcile-")
	if err != nil {
		t.Logf("no /dev/shm (%v): the plain file is on the test's own directory", err)
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestPassListedSandboxState checks that, while CRI lists the sandbox, a
// netns path that names no netns here releases the attachment only when
// CRI says the sandbox is not ready (its pause is dead), with reason
// sandbox_not_ready; a ready sandbox's is kept, a problem said once. A
// not-ready sandbox whose path opens on the recorded netns (a sandbox
// restarting), or whose attachment is younger than the minimum age, or
// whose netns cannot be read, is kept. So is an exclusive-mode one that
// holds a device until the kernel shows it back, when the repair releases
// it.
func TestPassListedSandboxState(t *testing.T) {
	plain := filepath.Join(tmpfsDir(t), "cni-plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		state    int32
		netns    string
		age      time.Duration
		release  string // reason label; "": kept
		problems int
		// exclusive says that the record holds a moved device, back on
		// the node when stranded.
		exclusive, stranded bool
		want                string // in the output
	}{
		{name: "ready, plain file", state: cri.StateReady, netns: plain, age: time.Hour, problems: 1,
			want: `reason=netns_unseen`},
		{name: "ready, path gone", state: cri.StateReady, netns: "/run/netns/missing", age: time.Hour, problems: 1,
			want: `reason=netns_unseen`},
		{name: "not ready, path gone", state: cri.StateNotReady, netns: "/run/netns/missing", age: time.Hour,
			release: metrics.ReasonSandboxNotReady,
			want:    `why="netns /run/netns/missing is gone while CRI still lists the sandbox, not ready"`},
		{name: "not ready, plain file", state: cri.StateNotReady, netns: plain, age: time.Hour,
			release: metrics.ReasonSandboxNotReady, want: `msg="released an attachment"`},
		{name: "not ready, path opens on the recorded netns", state: cri.StateNotReady, netns: "/run/netns/live", age: time.Hour,
			want: `msg="pass done" released=0 kept=1 problems=0`},
		{name: "not ready, path gone, young", state: cri.StateNotReady, netns: "/run/netns/missing", age: 10 * time.Second,
			want: `msg="kept an attachment CRI lists not ready: too young"`},
		{name: "not ready, unreadable", state: cri.StateNotReady, netns: "/run/netns/broken", age: time.Hour, problems: 1,
			want: `reason=netns_unreadable`},
		{name: "not ready, path names another netns", state: cri.StateNotReady, netns: "/run/netns/replaced", age: time.Hour,
			release: metrics.ReasonNetnsGone, want: `names another netns while CRI still lists the sandbox`},
		{name: "not ready, path gone, exclusive, device not back", state: cri.StateNotReady, netns: "/run/netns/missing", age: time.Hour,
			exclusive: true, want: `its device not back yet`},
		{name: "not ready, path gone, exclusive, device back", state: cri.StateNotReady, netns: "/run/netns/missing", age: time.Hour,
			exclusive: true, stranded: true, want: `msg="repaired an attachment"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rec("rdmanet", "pod", tt.netns, tt.age)
			if tt.exclusive {
				r.Mode = "exclusive"
				r.Links = []state.Link{{Device: "simrdma0", Kind: state.LinkMoved, Step: state.StepDone, RDMAMoved: true}}
			}
			n := newFakeNode(t, r)
			if tt.stranded {
				n.stranded = []string{"pod"}
			}
			n.gone["/run/netns/missing"] = true
			n.ids["/run/netns/replaced"] = netnsid.ID{Inode: recordedNetns.Inode + 1, Cookie: 9}
			n.sandboxes = []cri.Sandbox{{ID: "pod", State: tt.state}, {ID: "other"}}
			rc := n.reconciler("/run/cri.sock")
			if problems := rc.pass(context.Background()); problems != tt.problems {
				t.Errorf("problems %d, want %d", problems, tt.problems)
			}
			if deleted := len(n.deleted) == 1; deleted != (tt.release != "" || tt.stranded) {
				t.Errorf("released %v, want a release with reason %q (stranded %v)", n.deleted, tt.release, tt.stranded)
			}
			if tt.release != "" && testutil.ToFloat64(rc.metrics.Releases.WithLabelValues("rdmanet", tt.release)) != 1 {
				t.Errorf("not counted as a %s release", tt.release)
			}
			if !strings.Contains(n.out.String(), tt.want) {
				t.Errorf("output lacks %q", tt.want)
			}
			if t.Failed() {
				t.Logf("output:\n%s", n.out.String())
			}
		})
	}
}

// TestPassCountsStranded checks that each pass sets the stranded gauge
// to the exclusive-mode attachments an ADD marked stranded that still
// hold a device, and to 0 once none is.
func TestPassCountsStranded(t *testing.T) {
	exclusive := func(cid string, stranded bool) *state.Record {
		r := rec("rdmanet", cid, "/run/netns/"+cid, time.Hour)
		r.Mode = rdma.ModeExclusive
		r.Links = []state.Link{{Device: "mlx5_" + cid, Kind: state.LinkMoved, Step: state.StepDone}}
		if stranded {
			r.StrandedAt = now.Add(-time.Minute)
		}
		return r
	}
	released := exclusive("released", true)
	released.Links[0].Step = state.StepReleased
	n := newFakeNode(t, exclusive("a", true), exclusive("b", true), exclusive("c", false), released)
	for _, id := range []string{"a", "b", "c", "released"} {
		n.sandboxes = append(n.sandboxes, cri.Sandbox{ID: id})
	}
	r := n.reconciler("/run/cri.sock")
	r.pass(context.Background())
	if got := testutil.ToFloat64(r.metrics.Stranded.WithLabelValues("rdmanet")); got != 2 {
		t.Errorf("stranded gauge %v, want 2 (a and b)\n%s", got, n.out.String())
	}
	for _, f := range []string{"a", "b"} {
		if err := state.New(n.dir).Delete(state.Key{Network: "rdmanet", ContainerID: f, IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	r.pass(context.Background())
	if got := testutil.ToFloat64(r.metrics.Stranded.WithLabelValues("rdmanet")); got != 0 {
		t.Errorf("stranded gauge %v after their records went, want 0", got)
	}
}
