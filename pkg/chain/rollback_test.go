package chain

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

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
