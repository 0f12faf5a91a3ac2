package chain

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func TestDelIdempotent(t *testing.T) {
	cases := []struct {
		name  string
		netns string
		want  string
	}{
		{"netns given", "/var/run/netns/pod", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"},
		{"empty CNI_NETNS uses the recorded path", "", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := added(t, dir, "c1")
			w.calls = nil
			args := cmd(dir, "", "")
			args.Netns = tc.netns
			for i := 0; i < 2; i++ {
				if err := w.plugin().Del(args); err != nil {
					t.Fatal(err)
				}
			}
			if !reflect.DeepEqual(w.calls, []string{tc.want}) {
				t.Errorf("calls %v", w.calls)
			}
		})
	}
	t.Run("never added, no dataDir", func(t *testing.T) {
		w := &world{}
		if err := w.plugin().Del(cmd(filepath.Join(t.TempDir(), "none"), "", "")); err != nil || len(w.calls) != 0 {
			t.Fatalf("err %v calls %v", err, w.calls)
		}
	})
	t.Run("failed DEL keeps state for a retry", func(t *testing.T) {
		dir := t.TempDir()
		w, _ := added(t, dir, "c1")
		w.failOn = map[string]error{"DelChild": errors.New("busy")}
		wantCode(t, w.plugin().Del(cmd(dir, "", "")), CodeLinkSetup, "busy")
		if len(stateFiles(t, dir)) != 1 {
			t.Fatal("state dropped after failed DEL")
		}
		w.failOn = nil
		if err := w.plugin().Del(cmd(dir, "", "")); err != nil || len(stateFiles(t, dir)) != 0 {
			t.Fatalf("retry: %v", err)
		}
	})
}

// TestDelLeavesRecordMadeAgain checks that a DEL whose record was
// released while it gave back the leases and recorded again by a new ADD
// of the same container and interface (by a plugin that takes no key
// lock: an earlier version's, during an upgrade) leaves that record, its
// links and its leases alone.
func TestDelLeavesRecordMadeAgain(t *testing.T) {
	const conf = `,"podSelection":"all","ipam":{"type":"host-local"}`
	for _, c := range []struct {
		name string
		mode rdma.Mode
		dev  rdma.Device
	}{
		{"shared", rdma.ModeShared, rxe("rxe0", "veth0")},
		{"exclusive", rdma.ModeExclusive, rdma.Device{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &world{mode: c.mode, devices: []rdma.Device{c.dev}}
			p := w.plugin()
			if err := p.Add(cmd(dir, conf, prevResult100)); err != nil {
				t.Fatal(err)
			}
			key := state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"}
			var againErr error
			w.onIPAMDel = func() {
				w.onIPAMDel = nil
				againErr = recordAgain(dir, key)
				w.calls = nil
			}
			if err := p.Del(cmd(dir, conf, "")); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if againErr != nil {
				t.Fatalf("recording it again during DEL: %v", againErr)
			}
			rec, err := state.New(dir).Get(key)
			if err != nil {
				t.Fatalf("the new ADD's record: %v (calls after it %v)", err, w.calls)
			}
			for _, l := range rec.Links {
				if l.Step == state.StepReleased || !l.IPAM {
					t.Errorf("the new ADD's link %s marked released (step %v, lease held %v)", l.PodName, l.Step, l.IPAM)
				}
			}
			if len(w.calls) != 0 {
				t.Errorf("the first DEL acted after the new ADD: %v", w.calls)
			}
		})
	}
}

// recordAgain writes key's record again, under the node lock, as a new
// ADD would after a DEL: the same links and leases, another creation time.
func recordAgain(dir string, key state.Key) error {
	store := state.New(dir)
	unlock, err := store.Lock(time.Second)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := store.Get(key)
	if err != nil {
		return err
	}
	rec.CreatedAt = time.Time{}
	time.Sleep(time.Millisecond) // another creation time, even on a coarse clock
	return store.Put(rec)
}

// TestReleaseWaitsForSameKey checks that the runtime's DEL and a new ADD
// of the same container and interface wait for a release under way (the
// reconcile daemon's DEL) instead of running inside it: that release gave
// back, by container and interface, the lease the new ADD had just taken
// under the same names (it failed so on c64bc43: the new record's rdma1
// lease was released last).
func TestReleaseWaitsForSameKey(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1")}}
	p := w.plugin()
	if err := p.Add(cmd(dir, withIPAM, prevResult100)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	w.onIPAMDel = func() { // after the first of the release's two leases
		w.onIPAMDel = nil
		go func() {
			err := p.Del(cmd(dir, withIPAM, ""))
			done <- cmp.Or(err, p.Add(cmd(dir, withIPAM, prevResult100)))
		}()
		select {
		case err := <-done:
			done <- err
		case <-time.After(300 * time.Millisecond):
		}
	}
	if err := p.Del(cmd(dir, withIPAM, "")); err != nil {
		t.Fatalf("the release: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the runtime's DEL and ADD: %v", err)
	}
	rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"})
	if err != nil {
		t.Fatalf("the new ADD's record: %v", err)
	}
	for _, l := range rec.Links {
		if !l.IPAM {
			continue
		}
		var last string
		for _, call := range w.calls {
			if call == "IPAMAdd c1 "+l.PodName || call == "IPAMDel c1 "+l.PodName {
				last = call
			}
		}
		if !strings.HasPrefix(last, "IPAMAdd ") {
			t.Errorf("the new ADD's lease on %s: last IPAM call %q, want its ADD (calls %v)", l.PodName, last, w.calls)
		}
	}
	noKeyLocks(t, dir)
}

// TestDelWithoutRecordTakesNoLock checks that a DEL with no record to act
// on (a pod ADD passed through, a second DEL) ends without the node lock:
// it succeeds while another call holds it.
func TestDelWithoutRecordTakesNoLock(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"no state yet", func(*testing.T, string) {}},
		{"another pod's record", func(t *testing.T, dir string) { added(t, dir, "c2") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			unlock, err := state.New(dir).Lock(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			w := &world{}
			p := w.plugin()
			p.env.LockTimeout = 100 * time.Millisecond
			if err := p.Del(cmd(dir, `,"podSelection":"all"`, "")); err != nil {
				t.Fatalf("DEL = %v", err)
			}
			if len(w.calls) != 0 {
				t.Errorf("calls %v, want none", w.calls)
			}
		})
	}
}

// TestDelPartialFailureKeepsFailedLink checks that a DEL that fails on
// one link keeps exactly that link for the retry.
func TestDelPartialFailureKeepsFailedLink(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1")}}
	if err := w.plugin().Add(cmd(dir, `,"podSelection":"all"`, prevResult100)); err != nil {
		t.Fatal(err)
	}
	w.failOn = map[string]error{"DelChild": errors.New("busy")}
	w.failNth = map[string]int{"DelChild": 1} // rdma1 is detached first
	wantCode(t, w.plugin().Del(cmd(dir, "", "")), CodeLinkSetup, "busy")
	w.failOn, w.calls = nil, nil
	if err := w.plugin().Del(cmd(dir, "", "")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.calls, []string{"DelChild /var/run/netns/pod rdma1 02:00:00:00:00:01"}) {
		t.Errorf("retry calls %v, want the failed rdma1 only", w.calls)
	}
}

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

// TestDelChildByRecordedID checks that a child whose record has its nsid
// is deleted (or proven gone) through that nsid and its ifindex before
// its lease goes, by DEL and GC, whether the netns path names the pod's
// netns or none, and never by name; the host side leaves the child
// released. A child not proven gone answers 11 and releases nothing. A
// lease release that fails keeps the record with the child released: the
// next DEL gives back the lease alone.
func TestDelChildByRecordedID(t *testing.T) {
	const byID = "DelChildByID 7/1048579 02:00:00:00:00:00"
	unproven := fmt.Errorf("look up: %w", netdev.ErrUnproven)
	for _, tt := range []struct {
		name     string
		conf     string // withIPAM when ""
		gc       bool
		gone     bool // the netns path names no netns
		failOn   map[string]error
		wantCode uint
		want     []string
	}{
		{name: "DEL, path gone", gone: true, want: []string{byID, "IPAMDel c1 rdma0"}},
		{name: "DEL, path there", want: []string{byID, "IPAMDel c1 rdma0"}},
		{name: "GC, path gone", gc: true, gone: true, want: []string{byID, "IPAMDel c1 rdma0"}},
		{name: "DEL, no lease", conf: podAll, want: []string{byID}},
		{name: "unproven, path gone", gone: true, failOn: map[string]error{"DelChildByID": unproven}, wantCode: types.ErrTryAgainLater, want: []string{byID}},
		{name: "unproven, path there", failOn: map[string]error{"DelChildByID": unproven}, wantCode: types.ErrTryAgainLater, want: []string{byID}},
		{name: "lease kept", failOn: map[string]error{"IPAMDel": errors.New("busy")}, wantCode: CodeIPAM, want: []string{byID, "IPAMDel c1 rdma0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}, childNsid: true}
			dir, conf := t.TempDir(), cmp.Or(tt.conf, withIPAM)
			if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
				t.Fatal(err)
			}
			w.calls, w.gone, w.failOn = nil, map[string]bool{"/var/run/netns/pod": tt.gone}, tt.failOn
			args, verb := cmd(dir, conf, ""), w.plugin().Del
			if tt.gc {
				args, verb = cmd(dir, conf+`,"cni.dev/valid-attachments":[]`, ""), w.plugin().GC
			}
			err := verb(args)
			if got := w.callsNamed("DelChild", "DelChildByID", "IPAMDel"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("calls %q, want %q", got, tt.want)
			}
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tt.wantCode, "")
			rec := onlyRecord(t, dir)
			if l := rec.Links[0]; !l.IPAM || (l.Step == state.StepReleased) != (tt.wantCode == CodeIPAM) {
				t.Errorf("kept link %+v, want its lease and the child released only when the lease was kept", l)
			}
			w.calls, w.failOn = nil, nil
			if err := w.plugin().Del(cmd(dir, withIPAM, "")); err != nil {
				t.Fatalf("next DEL: %v", err)
			}
			want := []string{byID, "IPAMDel c1 rdma0"}
			if tt.wantCode == CodeIPAM {
				want = want[1:]
			}
			if got := w.callsNamed("DelChild", "DelChildByID", "IPAMDel"); !reflect.DeepEqual(got, want) || len(stateFiles(t, dir)) != 0 {
				t.Errorf("next DEL: calls %q, want %q; records %d", got, want, len(stateFiles(t, dir)))
			}
		})
	}
}

// TestDelQuarantinesUnreadableRecord checks that DEL of an unreadable
// record succeeds, moves the record aside and releases the leases the
// pod may hold.
func TestDelQuarantinesUnreadableRecord(t *testing.T) {
	for _, body := range []string{"", "{", "[1,2]", "null", "\x00\x01binary", `{"version":99}`} {
		dir := t.TempDir()
		w, _ := added(t, dir, "c1")
		files := stateFiles(t, dir)
		if len(files) != 1 {
			t.Fatalf("records %v", files)
		}
		if err := os.WriteFile(files[0], []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		w.calls = nil
		args := cmd(dir, `,"podSelection":"all","ipam":{"type":"host-local"}`, "")
		if err := w.plugin().Del(args); err != nil {
			t.Fatalf("DEL with record %q: %v", body, err)
		}
		if len(stateFiles(t, dir)) != 0 {
			t.Errorf("record %q left in place", body)
		}
		if q, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*")); len(q) != 1 {
			t.Errorf("quarantine %v", q)
		}
		if !slices.Contains(w.calls, "IPAMDel c1 rdma0") {
			t.Errorf("inferred lease not released: %v", w.calls)
		}
		if err := w.plugin().Del(args); err != nil {
			t.Errorf("second DEL: %v", err)
		}
	}
}

// TestDelWithoutPossibleStateDir checks that DEL succeeds when the
// state directory cannot even exist.
func TestDelWithoutPossibleStateDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := &world{}
	if err := w.plugin().Del(cmd(filepath.Join(file, "state"), "", "")); err != nil {
		t.Fatal(err)
	}
}

// TestDelDataDirIsFile checks that a dataDir that is a regular file
// holds no state: DEL succeeds.
func TestDelDataDirIsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (&world{}).plugin().Del(cmd(file, "", "")); err != nil {
		t.Fatal(err)
	}
}

func TestGC(t *testing.T) {
	dir := t.TempDir()
	w, _ := added(t, dir, "keep")
	added(t, dir, "stale")
	other := state.New(dir)
	if err := other.Put(&state.Record{Network: "othernet", ContainerID: "x", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	gc := cmd(dir, `,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]`, "")
	if err := w.plugin().GC(gc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.calls, []string{"DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}) {
		t.Errorf("calls %v", w.calls)
	}
	recs, _ := other.List()
	var kept []string
	for _, r := range recs {
		kept = append(kept, r.Network+"/"+r.ContainerID)
	}
	if !reflect.DeepEqual(kept, []string{"rdmanet/keep", "othernet/x"}) && !reflect.DeepEqual(kept, []string{"othernet/x", "rdmanet/keep"}) {
		t.Errorf("kept %v", kept)
	}
}

// TestGCLeavesAttachmentInAnotherCall checks that GC leaves a stale
// attachment whose key lock another call holds (its own DEL under way)
// untouched, succeeds, and releases it once the lock is free.
func TestGCLeavesAttachmentInAnotherCall(t *testing.T) {
	dir := t.TempDir()
	w, _ := added(t, dir, "stale")
	unlock, err := state.New(dir).LockKey(state.Key{Network: "rdmanet", ContainerID: "stale", IfName: "eth0"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	gc := cmd(dir, `,"cni.dev/valid-attachments":[]`, "")
	if err := w.plugin().GC(gc); err != nil {
		t.Fatalf("GC while another call holds the attachment: %v", err)
	}
	if len(w.calls) != 0 || len(stateFiles(t, dir)) != 1 {
		t.Errorf("GC acted on an attachment another call holds: calls %v, records %v", w.calls, stateFiles(t, dir))
	}
	unlock()
	if err := w.plugin().GC(gc); err != nil {
		t.Fatal(err)
	}
	if files := stateFiles(t, dir); len(files) != 0 {
		t.Errorf("records left after the lock was free: %v", files)
	}
}

// TestGCHoldsStaleKeys checks that GC holds the key lock of every stale
// attachment from the moment it reads it: the runtime's DEL and a new ADD
// of one of them, started while GC releases the other, wait for GC instead
// of running in between, so GC never gives back the new ADD's lease. It
// failed when GC took each key lock only just before its release (the
// new ADD's lease was released last).
func TestGCHoldsStaleKeys(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	p := w.plugin()
	args := func(id string, prev string) *skel.CmdArgs {
		a := cmd(dir, withIPAM, prev)
		a.ContainerID = id
		return a
	}
	for _, id := range []string{"a", "b"} {
		if err := p.Add(args(id, prevResult100)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	// later is the attachment GC releases second: its DEL and new ADD
	// run while GC releases the first.
	var later string
	w.onIPAMDel = func() {
		w.onIPAMDel = nil
		w.mu.Lock()
		later = "a"
		if strings.HasPrefix(w.calls[len(w.calls)-1], "IPAMDel a ") {
			later = "b"
		}
		w.mu.Unlock()
		go func() { done <- cmp.Or(p.Del(args(later, "")), p.Add(args(later, prevResult100))) }()
		select {
		case err := <-done:
			done <- err
		case <-time.After(300 * time.Millisecond):
		}
	}
	gc := cmd(dir, withIPAM+`,"cni.dev/valid-attachments":[]`, "")
	if err := p.GC(gc); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the runtime's DEL and ADD of b: %v", err)
	}
	var last string
	for _, call := range w.calls {
		if strings.HasPrefix(call, "IPAMAdd "+later+" ") || strings.HasPrefix(call, "IPAMDel "+later+" ") {
			last = call
		}
	}
	if !strings.HasPrefix(last, "IPAMAdd ") {
		t.Errorf("%s's new lease: last IPAM call %q, want its ADD (calls %v)", later, last, w.calls)
	}
	noKeyLocks(t, dir)
}

// TestGCQuarantinesUnreadableRecord checks that GC goes on past
// unreadable records (quarantined) and succeeds.
func TestGCQuarantinesUnreadableRecord(t *testing.T) {
	dir := t.TempDir()
	w, _ := added(t, dir, "c1")
	if err := os.MkdirAll(filepath.Join(dir, "attachments", "bad-0123.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.plugin().GC(cmd(dir, `,"podSelection":"all"`, "")); err != nil {
		t.Fatal(err)
	}
	if files := stateFiles(t, dir); len(files) != 0 {
		t.Errorf("records left: %v", files)
	}
}
