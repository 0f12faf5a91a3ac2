package chain

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// releasedMidwayCases are the attachments TestAddReleasedMidway and
// TestDelWaitsForAdd make: one per mode.
var releasedMidwayCases = []struct {
	name string
	mode rdma.Mode
	dev  rdma.Device
}{
	{"shared", rdma.ModeShared, rxe("rxe0", "veth0")},
	{"exclusive", rdma.ModeExclusive, rdma.Device{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}},
}

// TestAddReleasedMidway checks that an attachment whose record goes while
// its ADD runs without the node lock (a release by a plugin that takes no
// key lock: the reconcile container of an earlier version during an
// upgrade) is not written back by ADD's last phase: ADD fails, so that
// the runtime tries again, and gives back what it made, leaving no record
// of an attachment that no longer exists.
func TestAddReleasedMidway(t *testing.T) {
	const conf = `,"podSelection":"all","ipam":{"type":"host-local"}`
	for _, c := range releasedMidwayCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &world{mode: c.mode, devices: []rdma.Device{c.dev}}
			p := w.plugin()
			key := state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"}
			var delErr error
			w.onIPAM = func() {
				w.onIPAM = nil
				unlock, err := state.New(dir).Lock(time.Second)
				if err != nil {
					delErr = err
					return
				}
				delErr = state.New(dir).Delete(key)
				unlock()
			}
			w.stdout.Reset()
			err := p.Add(cmd(dir, conf, prevResult100))
			if delErr != nil {
				t.Fatalf("the release during ADD: %v", delErr)
			}
			wantCode(t, err, CodeState, "released while ADD ran")
			if w.stdout.Len() != 0 {
				t.Errorf("ADD printed a result: %s", w.stdout.String())
			}
			if _, err := state.New(dir).Get(key); err == nil {
				t.Error("ADD wrote back the record of an attachment released meanwhile")
			}
			if n := len(filterCalls(w.calls, "IPAMDel")); n < 1 {
				t.Errorf("no IPAM DEL of the failed ADD's lease: %v", w.calls)
			}
		})
	}
}

// TestDelWaitsForAdd checks that a DEL of an attachment whose ADD is under
// way (the reconcile daemon's, or the runtime's after its ADD timed out)
// waits for the ADD's key lock, then gives back all the ADD made: the ADD
// succeeds, and neither leaves a record or a lease. On a plugin without
// key locks the DEL ran inside the ADD and the ADD failed.
func TestDelWaitsForAdd(t *testing.T) {
	const conf = `,"podSelection":"all","ipam":{"type":"host-local"}`
	for _, c := range releasedMidwayCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &world{mode: c.mode, devices: []rdma.Device{c.dev}}
			p := w.plugin()
			delDone := make(chan error, 1)
			var doneEarly bool
			w.onIPAM = func() {
				w.onIPAM = nil
				go func() { delDone <- p.Del(cmd(dir, conf, "")) }()
				select {
				case err := <-delDone:
					doneEarly = true
					delDone <- err
				case <-time.After(300 * time.Millisecond):
				}
			}
			addErr := p.Add(cmd(dir, conf, prevResult100))
			delErr := <-delDone
			if doneEarly {
				t.Errorf("the DEL ended inside the ADD (%v): it did not wait for the key lock", delErr)
			}
			if addErr != nil || delErr != nil {
				t.Fatalf("ADD: %v; DEL: %v", addErr, delErr)
			}
			if n := len(stateFiles(t, dir)); n != 0 {
				t.Errorf("%d records left, want none", n)
			}
			var calls []string
			for _, call := range w.calls {
				if strings.HasPrefix(call, "IPAM") {
					calls = append(calls, call)
				}
			}
			if len(calls) == 0 || !strings.HasPrefix(calls[len(calls)-1], "IPAMDel ") {
				t.Errorf("IPAM calls %v: want the DEL's release last", calls)
			}
			noKeyLocks(t, dir)
		})
	}
}

// TestDelWaitsForUnrecordedAdd checks that a DEL that finds no record
// while an ADD of the same attachment holds its key lock (the ADD has not
// recorded yet) waits for the ADD and releases what it recorded: no
// record is left. It failed before the DEL looked at the key lock (the
// DEL ended at once, and the ADD recorded after it).
func TestDelWaitsForUnrecordedAdd(t *testing.T) {
	const conf = `,"podSelection":"all","ipam":{"type":"host-local"}`
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	p := w.plugin()
	delDone := make(chan error, 1)
	var doneEarly bool
	w.onDevices = func() {
		w.onDevices = nil
		go func() { delDone <- p.Del(cmd(dir, conf, "")) }()
		select {
		case err := <-delDone:
			doneEarly = true
			delDone <- err
		case <-time.After(300 * time.Millisecond):
		}
	}
	addErr := p.Add(cmd(dir, conf, prevResult100))
	delErr := <-delDone
	if doneEarly {
		t.Errorf("the DEL ended while the ADD ran (%v): it did not wait for the ADD's key lock", delErr)
	}
	if addErr != nil || delErr != nil {
		t.Fatalf("ADD: %v; DEL: %v", addErr, delErr)
	}
	if files := stateFiles(t, dir); len(files) != 0 {
		t.Errorf("records left: %v", files)
	}
	noKeyLocks(t, dir)
}

// TestAddExclusiveRereadsUnderLock checks that the netdev ADD moves is
// the one the kernel has under the node lock, not what ADD read before
// it: a netdev back from a dead pod netns as rdma0, renamed eth0 by the
// reconcile daemon's repair while this ADD waited for the lock, is
// moved as eth0.
func TestAddExclusiveRereadsUnderLock(t *testing.T) {
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("mlx5_0", "rdma0")},
		devicesNow: []rdma.Device{rxe("mlx5_0", "eth0")}}
	dir := t.TempDir()
	if err := w.plugin().Add(cmd(dir, `,"podSelection":"all"`, prevResult100)); err != nil {
		t.Fatal(err)
	}
	if got := filterCalls(w.calls, "Describe"); !slices.Equal(got, []string{"Describe eth0 rdma0"}) {
		t.Errorf("ADD described %q, want the netdev as it is under the lock: calls %v", got, w.calls)
	}
	if got := filterCalls(w.calls, "MoveToPod"); !slices.Equal(got, []string{"MoveToPod eth0 rdma0"}) {
		t.Errorf("ADD moved %q, want eth0", got)
	}
}

// TestGIDRoom checks that a shared-mode link that will get an address
// needs room for it in its port's GID table (the kernel adds no GID to
// a full table and says nothing): refused before the child is made, the
// record gone; a link without an address, or a port without a table, is
// not checked. The table is the fake's (logic only); pkg/rdma reads the
// kernel's rows.
func TestGIDRoom(t *testing.T) {
	tests := []struct {
		name    string
		conf    string
		gids    [2]int // free, size
		readErr error
		code    uint // 0: attached
	}{
		{"room", withIPAM, [2]int{2, 1024}, nil, 0},
		{"full", withIPAM, [2]int{0, 1024}, nil, CodeGIDTableFull},
		{"one entry left", withIPAM, [2]int{1, 16}, nil, CodeGIDTableFull},
		{"unreadable table", withIPAM, [2]int{}, errors.New("EIO"), CodeGIDTableFull},
		{"no table", withIPAM, [2]int{0, 0}, nil, 0},
		{"no address: not checked", `,"podSelection":"all"`, [2]int{0, 1024}, errors.New("EIO"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
				gids: map[string][2]int{"rxe0": tt.gids}, failOn: map[string]error{"FreeGIDs": tt.readErr}}
			dir := t.TempDir()
			err := w.plugin().Add(cmd(dir, tt.conf, prevResult100))
			if tt.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tt.code, "rxe0")
			if tt.readErr == nil && !strings.Contains(err.Error(), "no RoCE GID") {
				t.Errorf("error %q does not say why", err)
			}
			if slices.ContainsFunc(w.calls, func(c string) bool { return strings.HasPrefix(c, "AddChild") || strings.HasPrefix(c, "IPAMAdd") }) {
				t.Errorf("a child or a lease after the refusal: %v", w.calls)
			}
			if recs, _ := state.New(dir).List(); len(recs) != 0 {
				t.Errorf("records left: %+v", recs)
			}
		})
	}
}

// TestExclusiveRollbackAtEveryStep checks that every step of an exclusive
// ADD that fails is undone from its record, in reverse order, as DEL would,
// and leaves no state. A link's netdev and RDMA device are recorded in one
// write before either moves, so a failed netdev move also gives back the
// RDMA device, which never left: changing nothing.
func TestExclusiveRollbackAtEveryStep(t *testing.T) {
	devs := []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5_1", "eth2")}
	cases := []struct {
		failAt string
		nth    int // fail the nth call of failAt (1-based)
		undo   []string
	}{
		{"OpenNS", 1, nil},
		{"Describe", 1, nil},
		{"MoveToPod", 1, []string{"ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
		{"MoveToNetns", 1, []string{"ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
		{"MoveToPod", 2, []string{"ReturnToHost mlx5_1 /var/run/netns/pod", "RestoreToHost eth2 /var/run/netns/pod", "ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
		{"MoveToNetns", 2, []string{"ReturnToHost mlx5_1 /var/run/netns/pod", "RestoreToHost eth2 /var/run/netns/pod", "ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s#%d", tc.failAt, tc.nth), func(t *testing.T) {
			w := &world{mode: rdma.ModeExclusive, devices: devs,
				allocs:  []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0", "mlx5_1"}}},
				failOn:  map[string]error{tc.failAt: errors.New("injected")},
				failNth: map[string]int{tc.failAt: tc.nth}}
			dir := t.TempDir()
			if err := w.plugin().Add(cmd(dir, `,"devices":["mlx5_0","mlx5_1"]`, prevResult100)); err == nil {
				t.Fatal("ADD succeeded")
			}
			if got := w.callsAfter(tc.failAt, tc.nth); !reflect.DeepEqual(got, tc.undo) {
				t.Errorf("undo = %v, want %v", got, tc.undo)
			}
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("state left: %v", f)
			}
			noKeyLocks(t, dir)
		})
	}
}

// TestSharedRollbackAtAddChild checks that a shared-mode ADD whose
// AddChild fails undoes the children made before it, and the failing one
// too when AddChild says it created it (a child not read back: DelChild
// by name, without its MAC).
func TestSharedRollbackAtAddChild(t *testing.T) {
	devs := []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1")}
	cases := []struct {
		nth  int
		left bool
		undo []string
	}{
		{1, false, nil},
		{1, true, []string{"DelChild /var/run/netns/pod rdma0 "}},
		{2, false, []string{"DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}},
		{2, true, []string{"DelChild /var/run/netns/pod rdma1 ", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("AddChild#%d/created=%v", tc.nth, tc.left), func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: devs, childLeft: tc.left,
				failOn: map[string]error{"AddChild": errors.New("injected")}, failNth: map[string]int{"AddChild": tc.nth}}
			dir := t.TempDir()
			if err := w.plugin().Add(cmd(dir, `,"devices":["rxe0","rxe1"],"podSelection":"all"`, prevResult100)); err == nil {
				t.Fatal("ADD succeeded")
			}
			if got := w.callsAfter("AddChild", tc.nth); !reflect.DeepEqual(got, tc.undo) {
				t.Errorf("undo = %v, want %v", got, tc.undo)
			}
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("state left: %v", f)
			}
			noKeyLocks(t, dir)
		})
	}
}

// fullAdd is an ADD that makes every kind of host change: two exclusive
// links (netdev and RDMA device moved), an IPAM lease and addresses on
// each, the device-info file, both SMC-R pnet entries, the socket hook's
// listing and the UEID.
func fullAdd(t *testing.T) (w *world, dir, conf, devInfo string) {
	t.Helper()
	devs := []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5_1", "eth2")}
	devs[0].PCI, devs[1].PCI = "0000:3b:00.0", "0000:3c:00.0"
	w = &world{mode: rdma.ModeExclusive, devices: devs,
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0", "mlx5_1"}}}}
	dir = t.TempDir()
	devInfo = filepath.Join(dir, "devinfo", "net1-c1-eth0.json")
	conf = `,"devices":["mlx5_0","mlx5_1"],` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]},` +
		`"smcr":{"onUnsupported":"fail","transparent":"bpf","ueid":"RDMACHAIN"},` +
		`"runtimeConfig":{"CNIDeviceInfoFile":"` + devInfo + `",` +
		`"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}`
	return w, dir, conf, devInfo
}

// assertNothingLeft checks that the fake node is as before ADD: every change
// a call made (or may have made half way, when it failed) was given back by
// a later call, and no pnet entry, hook listing, device-info file or record
// remains.
func assertNothingLeft(t *testing.T, w *world, dir, devInfo string) {
	t.Helper()
	undoneBy := map[string]string{"MoveToPod": "RestoreToHost", "MoveToNetns": "ReturnToHost",
		"IPAMAdd": "IPAMDel", "HookAdd": "HookRemove", "AddChild": "DelChild"}
	for i, c := range w.calls {
		verb, what, _ := strings.Cut(c, " ")
		undo, ok := undoneBy[verb]
		if !ok {
			continue
		}
		f := strings.Fields(what)
		target := f[0]
		switch verb {
		case "IPAMAdd":
			target = f[0] + " " + f[1] // container, interface
		case "AddChild":
			target = f[3] // kind, mode, parent, name
		}
		if !undoneLater(w.calls[i+1:], undo, target) {
			t.Errorf("%q never undone by %s: %v", c, undo, w.calls)
		}
	}
	for ns, entries := range w.pnet {
		if len(entries) != 0 {
			t.Errorf("pnet entries left in netns %q: %v", ns, entries)
		}
	}
	if len(w.hooked) != 0 {
		t.Errorf("netns left in the socket hook: %v", w.hooked)
	}
	assertFile(t, devInfo, "", "after the failed ADD")
	if f := stateFiles(t, dir); len(f) != 0 {
		t.Errorf("state left: %v", f)
	}
}

// undoneLater reports whether calls hold undo for target (a device, a
// netdev, a container's interface or a netns inode).
func undoneLater(calls []string, undo, target string) bool {
	for _, c := range calls {
		verb, what, _ := strings.Cut(c, " ")
		f := strings.Fields(what)
		if verb != undo || len(f) == 0 {
			continue
		}
		switch {
		case verb == "IPAMDel" && len(f) > 1 && f[0]+" "+f[1] == target:
		case verb == "IPAMDel":
			continue
		case verb == "DelChild" && len(f) > 1 && f[1] == target:
		case verb == "DelChild":
			continue
		case f[0] != target:
			continue
		}
		return true
	}
	return false
}

// TestFailedAddReleasedAtEveryStep checks that a failure at any step of
// ADD is undone by DEL's own release from the record, and the runtime sees
// that step's error with its documented code.
func TestFailedAddReleasedAtEveryStep(t *testing.T) {
	cases := []struct {
		failAt string
		nth    int
		code   uint
	}{
		{"Describe", 1, CodeLinkSetup},
		{"MoveToPod", 1, CodeLinkSetup},
		{"MoveToNetns", 1, CodeLinkSetup},
		{"Describe", 2, CodeLinkSetup},
		{"MoveToPod", 2, CodeLinkSetup},
		{"MoveToNetns", 2, CodeLinkSetup},
		{"IPAMAdd", 1, CodeIPAM},
		{"Configure", 1, CodeLinkSetup},
		{"IPAMAdd", 2, CodeIPAM},
		{"Configure", 2, CodeLinkSetup},
		{"EnsurePnet", 1, CodeSMC}, // the host entry
		{"EnsurePnet", 2, CodeSMC}, // the pod entry
		{"HookSupported", 1, CodeSMC},
		{"HookAdd", 1, CodeSMC},
		{"EnsureUEID", 1, CodeSMC},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s#%d", tc.failAt, tc.nth), func(t *testing.T) {
			w, dir, conf, devInfo := fullAdd(t)
			w.failOn = map[string]error{tc.failAt: errors.New("injected")}
			w.failNth = map[string]int{tc.failAt: tc.nth}
			wantCode(t, w.plugin().Add(cmd(dir, conf, prevResult100)), tc.code, "injected")
			if len(w.callsAfter(tc.failAt, tc.nth)) == 0 && tc.failAt != "Describe" {
				t.Errorf("nothing undone after %s: %v", tc.failAt, w.calls)
			}
			assertNothingLeft(t, w, dir, devInfo)
		})
	}
	t.Run("complete ADD then DEL", func(t *testing.T) {
		w, dir, conf, devInfo := fullAdd(t)
		if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
			t.Fatal(err)
		}
		assertFile(t, devInfo, string(devinfo.Content("0000:3b:00.0", "mlx5_0")), "after ADD")
		if len(w.hooked) != 1 || len(w.pnet[""]) != 1 {
			t.Fatalf("ADD made no SMC-R change: %v %v", w.hooked, w.pnet)
		}
		if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, w, dir, devInfo)
	})
}

// TestFailedAddReleaseFailureKeepsRecord checks that an undo that fails
// after a failed ADD is logged, the runtime still sees the ADD's own
// error, and the record stays, with the progress made, for the runtime's
// DEL (or GC), which then gives back the rest.
func TestFailedAddReleaseFailureKeepsRecord(t *testing.T) {
	w, dir, conf, devInfo := fullAdd(t)
	w.failOn = map[string]error{"EnsureUEID": errors.New("injected"), "RestoreToHost": errors.New("EBUSY")}
	w.failNth = map[string]int{"RestoreToHost": 1}
	wantCode(t, w.plugin().Add(cmd(dir, conf, prevResult100)), CodeSMC, "injected")
	if !strings.Contains(w.stderr.String(), "cannot undo the failed ADD") {
		t.Errorf("release failure not logged: %s", w.stderr.String())
	}
	if f := stateFiles(t, dir); len(f) != 1 {
		t.Fatalf("record not kept: %v", f)
	}
	if len(w.hooked) != 0 || len(w.pnet[""]) != 0 {
		t.Errorf("the release stopped before the SMC-R changes: %v %v", w.hooked, w.pnet)
	}
	w.failOn = nil
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	// The failed release: eth2 (refused), eth1; DEL: eth2 only, and no
	// lease or device the failed release gave back a second time.
	for name, n := range map[string]int{"RestoreToHost": 3, "ReturnToHost": 2, "IPAMDel": 2} {
		if got := filterCalls(w.calls, name); len(got) != n {
			t.Errorf("%s called %d times, want %d: %v", name, len(got), n, w.calls)
		}
	}
	assertNothingLeft(t, w, dir, devInfo)
}

// TestFailedAddDeletesChildByID checks that a failed ADD's undo deletes
// a child recorded with its nsid through it before the lease goes, as
// DEL does, never by name.
func TestFailedAddDeletesChildByID(t *testing.T) {
	for _, failAt := range []string{"IPAMAdd", "Configure"} {
		t.Run(failAt, func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}, childNsid: true}
			w.failOn = map[string]error{failAt: errors.New("injected")}
			dir := t.TempDir()
			if err := w.plugin().Add(cmd(dir, withIPAM, prevResult100)); err == nil {
				t.Fatal("ADD succeeded")
			}
			want := []string{"DelChildByID 7/1048579 02:00:00:00:00:00", "IPAMDel c1 rdma0"}
			if got := w.callsNamed("DelChild", "DelChildByID", "IPAMDel"); !reflect.DeepEqual(got, want) {
				t.Errorf("undo %q, want %q", got, want)
			}
			if len(stateFiles(t, dir)) != 0 {
				t.Error("the record is left")
			}
		})
	}
}
