package chain

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestExclusiveStrandedHolderReclaimed checks that a pod whose netns died
// without a DEL does not hold its exclusive device forever: the next
// pod's ADD gives it back as DEL would and gets it.
func TestExclusiveStrandedHolderReclaimed(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	conf := `,"podSelection":"all","ipam":{"type":"host-local"}`
	a := cmd(dir, conf, prevResult100)
	a.ContainerID, a.Netns = "podA", "/var/run/netns/a"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	b := cmd(dir, conf, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	wantCode(t, w.plugin().Add(b), types.ErrTryAgainLater, "mlx5_0")

	w.gone = map[string]bool{"/var/run/netns/a": true}
	w.calls = nil
	if err := w.plugin().Add(b); err != nil {
		t.Fatalf("ADD after the holder's netns died: %v", err)
	}
	for _, want := range []string{"ReturnToHost mlx5_0 /var/run/netns/a", "RestoreToHost eth1 /var/run/netns/a",
		"IPAMDel podA rdma0", "MoveToNetns mlx5_0"} {
		if !slices.Contains(w.calls, want) {
			t.Errorf("calls lack %q: %v", want, w.calls)
		}
	}
	if files := stateFiles(t, dir); len(files) != 1 || !strings.Contains(files[0], "podB") {
		t.Errorf("records %v, want only podB's", files)
	}
	if !strings.Contains(w.stderr.String(), "reclaimed RDMA devices") {
		t.Errorf("reclaim not logged: %s", w.stderr.String())
	}
}

// TestStrandedNeedsDeadNetns checks that a holder whose netns path now
// names another netns (the path was reused) is stranded too; an alive one
// is never touched.
func TestStrandedNeedsDeadNetns(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	a := cmd(dir, `,"podSelection":"all"`, prevResult100)
	a.ContainerID = "podA"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	st := state.New(dir)
	rec, err := st.Get(state.Key{Network: "rdmanet", ContainerID: "podA", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	b := cmd(dir, `,"podSelection":"all"`, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	wantCode(t, w.plugin().Add(b), types.ErrTryAgainLater, "podA")
	// The kernel reused the inode number for a new netns at the same
	// path: only the cookie tells.
	w.cookieBump = map[string]uint64{"/var/run/netns/pod": 1}
	if err := w.plugin().Add(b); err != nil {
		t.Fatalf("ADD after the holder's netns path was reused: %v", err)
	}
	_ = rec
}

// TestReclaimRelistsDevices checks that after a reclaim the devices are
// listed again: the kernel gave the holder's netdev back under its pod
// name, and the reclaim renamed it.
func TestReclaimRelistsDevices(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}}}
	a := cmd(dir, `,"podSelection":"all"`, prevResult100)
	a.ContainerID, a.Netns = "podA", "/var/run/netns/a"
	if err := w.plugin().Add(a); err != nil {
		t.Fatal(err)
	}
	w.gone = map[string]bool{"/var/run/netns/a": true}
	w.devices = []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "rdma0"}} // as the kernel returned it
	w.onRestore = func() { w.devices = []rdma.Device{{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}} }
	b := cmd(dir, `,"podSelection":"all"`, prevResult100)
	b.ContainerID, b.Netns = "podB", "/var/run/netns/b"
	w.calls = nil
	if err := w.plugin().Add(b); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.calls, "Describe eth1 rdma0") {
		t.Errorf("pod B's netdev not the restored eth1: %v", w.calls)
	}
}

// TestDelIPAMPluginMissing checks that an IPAM plugin missing from
// CNI_PATH holds no lease: DEL goes on.
func TestDelIPAMPluginMissing(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	conf := `,"podSelection":"all","ipam":{"type":"host-local"}`
	if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
		t.Fatal(err)
	}
	w.failOn = map[string]error{"IPAMDel": fmt.Errorf("find IPAM plugin: %w", addr.ErrPluginNotFound)}
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	if len(stateFiles(t, dir)) != 0 {
		t.Error("record left")
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

// TestLockNotHeldAcrossIPAM checks that the node lock is not held while a
// delegated IPAM runs: another verb gets it meanwhile.
func TestLockNotHeldAcrossIPAM(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	var lockErr error
	w.onIPAM = func() {
		var unlock func()
		unlock, lockErr = state.New(dir).Lock(50 * time.Millisecond)
		if lockErr == nil {
			unlock()
		}
	}
	if err := w.plugin().Add(cmd(dir, `,"podSelection":"all","ipam":{"type":"host-local"}`, prevResult100)); err != nil {
		t.Fatal(err)
	}
	if lockErr != nil {
		t.Errorf("node lock held across IPAM ADD: %v", lockErr)
	}
	if err := w.plugin().Del(cmd(dir, `,"podSelection":"all","ipam":{"type":"host-local"}`, "")); err != nil {
		t.Fatal(err)
	}
}

// TestOwnNetnsRefused checks that CNI_NETNS naming the plugin's own netns
// is refused before anything runs, with one error.
func TestOwnNetnsRefused(t *testing.T) {
	for _, verb := range []string{"ADD", "DEL", "CHECK"} {
		w := &world{}
		args := cmd(t.TempDir(), "", prevResult100)
		args.Netns = "/proc/1/ns/net"
		var err error
		switch verb {
		case "ADD":
			err = w.plugin().Add(args)
		case "DEL":
			err = w.plugin().Del(args)
		default:
			err = w.plugin().Check(args)
		}
		wantCode(t, err, types.ErrInvalidNetNS, "own netns")
		if w.stdout.Len() != 0 || len(w.calls) != 0 {
			t.Errorf("%s: printed %q, calls %v", verb, w.stdout.String(), w.calls)
		}
	}
}

// TestResultHelpersSkipNil checks that null entries in a result never
// crash the plugin's own loops.
func TestResultHelpersSkipNil(t *testing.T) {
	r := mustResult(t, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x","mac":"02:00:00:00:00:01"}],"ips":[{"address":"10.0.0.1/24"}]}`)
	r.Interfaces = append(r.Interfaces, nil)
	r.IPs = append(r.IPs, nil)
	if len(resultMACs(r)) != 1 || !hasIPv4(r) || !hasInterface(r, "eth0", "/x") || hasInterface(r, "rdma0", "/x") {
		t.Error("helpers wrong over nil entries")
	}
}

func mustResult(t *testing.T, js string) *types100.Result {
	t.Helper()
	r, err := types100.NewResult([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	res, err := types100.GetResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestOutcomeRecorded checks that every verb leaves its outcome in the
// bounded log inspect reads; a failure keeps its code and message.
func TestOutcomeRecorded(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared}
	wantCode(t, w.plugin().Add(cmd(dir, `,"podSelection":"all"`, prevResult100)), CodeNoDevice, "")
	entries, err := outcome.Read(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("outcomes %v, %v", entries, err)
	}
	if e := entries[0]; e.Verb != "ADD" || e.Code != CodeNoDevice || e.Pod != "default/p1" || !e.Failed() {
		t.Errorf("outcome %+v", e)
	}
}

// TestCheckUnreadableRecord checks that CHECK of an unreadable record
// cannot verify the attachment: 105, and the record stays where it is for
// DEL.
func TestCheckUnreadableRecord(t *testing.T) {
	dir := t.TempDir()
	w, result := added(t, dir, "c1")
	files := stateFiles(t, dir)
	if err := os.WriteFile(files[0], []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w.plugin().Check(cmd(dir, `,"podSelection":"all"`, result)), CodeState, "")
	if len(stateFiles(t, dir)) != 1 {
		t.Error("CHECK moved the record")
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
