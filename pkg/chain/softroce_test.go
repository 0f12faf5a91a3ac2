package chain

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// softRoCEConf is a podSoftRoCE network on eth1 with an IPAM section and
// the device-info capability.
func softRoCEConf(devInfo string) string {
	return `,"podSoftRoCE":"eth1","ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]},` +
		`"runtimeConfig":{"CNIDeviceInfoFile":"` + devInfo + `"}`
}

// softRoCEWorld is a shared-mode node whose eth1 has no RDMA device (rxe0
// is on eth0) and a pod allocated the shared device plugin's synthetic ID.
func softRoCEWorld() *world {
	return &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "eth0")},
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"7"}}}}
}

// TestSoftRoCEAttachAndDel checks that the pod's rxe device is made on
// its macvlan child inside the pod netns after the child, recorded before
// it is made, named after the attachment and reported in the device-info
// file; DEL deletes it before the child.
func TestSoftRoCEAttachAndDel(t *testing.T) {
	w, dir := softRoCEWorld(), t.TempDir()
	devInfo := filepath.Join(dir, "devinfo", "c1.json")
	conf := softRoCEConf(devInfo)
	if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
		t.Fatal(err)
	}
	name := rdma.SoftRoCEName("rdmanet", "c1", "eth0")
	if !strings.HasPrefix(name, "rxe_") || len(name) != 16 {
		t.Fatalf("name %q, want rxe_ and 12 hex digits", name)
	}
	want := []string{"AddChild macvlan bridge eth1 rdma0", "RxeAdd " + name + " /var/run/netns/pod rdma0", "IPAMAdd c1 rdma0"}
	if got := relevant(w.calls, "AddChild", "RxeAdd", "IPAMAdd", "DelChild", "RxeDel"); !slices.Equal(got, want) {
		t.Errorf("ADD calls %v, want %v", got, want)
	}
	rec := onlyRecord(t, dir)
	if l := rec.Links[0]; l.Device != name || !l.SoftRoCE || l.Kind != state.LinkMACVlan || l.Step != state.StepDone {
		t.Errorf("recorded link %+v, want device %s, softRoCE, macvlan, done", l, name)
	}
	assertFile(t, devInfo, string(devinfo.Content("0000:00:03.0", name)), "after ADD")
	if err := w.plugin().Check(cmd(dir, conf, prevWithRDMA(t, w))); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	w.calls = nil
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	want = []string{"RxeDel " + name, "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}
	if got := relevant(w.calls, "AddChild", "RxeAdd", "DelChild", "RxeDel"); !slices.Equal(got, want) {
		t.Errorf("DEL calls %v, want %v", got, want)
	}
	if slices.ContainsFunc(w.devices, func(d rdma.Device) bool { return d.Name == name }) || len(stateFiles(t, dir)) != 0 {
		t.Errorf("left after DEL: devices %v, records %v", w.devices, stateFiles(t, dir))
	}
}

// TestSoftRoCERefused checks that where the pod's own rxe device could
// not carry its RoCE, ADD is refused with 112 saying why, before any
// change.
func TestSoftRoCERefused(t *testing.T) {
	name := rdma.SoftRoCEName("rdmanet", "c1", "eth0")
	cases := []struct {
		name  string
		setup func(w *world)
		want  string
	}{
		{"exclusive mode", func(w *world) { w.mode = rdma.ModeExclusive }, "exclusive netns mode"},
		{"kernel without per-netns rxe", func(w *world) { w.noRxe = "kernel 6.12.41: rdma_rxe works inside a netns only from Linux 7.1" },
			"only from Linux 7.1"},
		{"NIC with an RDMA device", func(w *world) { w.devices = append(w.devices, rxe("rxe1", "eth1")) }, "netdev eth1 has RDMA device rxe1"},
		{"name taken", func(w *world) { w.devices = append(w.devices, rxe(name, "")) }, "exists already"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, dir := softRoCEWorld(), t.TempDir()
			tc.setup(w)
			wantCode(t, w.plugin().Add(cmd(dir, softRoCEConf(filepath.Join(dir, "di.json")), prevResult100)), CodeSoftRoCE, tc.want)
			if got := relevant(w.calls, "RxeAdd", "RxeDel", "IPAMAdd"); len(got) != 0 {
				t.Errorf("refused ADD called %v", got)
			}
			if len(stateFiles(t, dir)) != 0 {
				t.Errorf("refused ADD left a record")
			}
			if tc.name != "name taken" && len(relevant(w.calls, "AddChild")) != 0 {
				t.Errorf("refused ADD made a child: %v", w.calls)
			}
		})
	}
}

// TestSoftRoCEFailedAddReleased checks that a failure at any step after
// the rxe device is recorded is undone from the record: the device is
// deleted before its child, and a device the kernel never made is only
// looked for.
func TestSoftRoCEFailedAddReleased(t *testing.T) {
	for _, failAt := range []string{"RxeAdd", "IPAMAdd", "Configure"} {
		t.Run(failAt, func(t *testing.T) {
			w, dir := softRoCEWorld(), t.TempDir()
			devInfo := filepath.Join(dir, "di.json")
			w.failOn = map[string]error{failAt: errors.New("injected")}
			if err := w.plugin().Add(cmd(dir, softRoCEConf(devInfo), prevResult100)); err == nil {
				t.Fatal("ADD succeeded")
			}
			got := relevant(w.calls, "RxeDel", "DelChild")
			if len(got) != 2 || !strings.HasPrefix(got[0], "RxeDel rxe_") || !strings.HasPrefix(got[1], "DelChild") {
				t.Errorf("undo %v, want RxeDel then DelChild", got)
			}
			assertNothingLeft(t, w, dir, devInfo)
			if len(w.devices) != 1 {
				t.Errorf("devices left: %v", w.devices)
			}
		})
	}
}

// TestSoftRoCEDelAfterCrash checks that a record a killed ADD left (the
// rxe device recorded, made or not) and a DEL that failed half way are
// given back by the next DEL, in order.
func TestSoftRoCEDelAfterCrash(t *testing.T) {
	w, dir := softRoCEWorld(), t.TempDir()
	conf := softRoCEConf(filepath.Join(dir, "di.json"))
	if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
		t.Fatal(err)
	}
	w.failOn = map[string]error{"DelChild": errors.New("EBUSY")}
	if err := w.plugin().Del(cmd(dir, conf, "")); err == nil {
		t.Fatal("DEL succeeded with DelChild failing")
	}
	if rec := onlyRecord(t, dir); rec.Links[0].SoftRoCE {
		t.Errorf("record still names the deleted rxe device: %+v", rec.Links[0])
	}
	w.failOn, w.calls = nil, nil
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	if got := relevant(w.calls, "RxeDel", "DelChild"); len(got) != 1 || !strings.HasPrefix(got[0], "DelChild") {
		t.Errorf("second DEL %v, want the child only", got)
	}
}

// TestSoftRoCEDelByRecordedID checks that a child recorded with its
// nsid has its rxe device deleted before it, and both before its lease
// goes, once each: the host side leaves them.
func TestSoftRoCEDelByRecordedID(t *testing.T) {
	w, dir := softRoCEWorld(), t.TempDir()
	w.childNsid = true
	conf := softRoCEConf(filepath.Join(dir, "di.json"))
	if err := w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	if err := w.plugin().Del(cmd(dir, conf, "")); err != nil {
		t.Fatal(err)
	}
	want := []string{"RxeDel " + rdma.SoftRoCEName("rdmanet", "c1", "eth0"), "DelChildByID 7/1048579 02:00:00:00:00:00", "IPAMDel c1 rdma0"}
	if got := relevant(w.calls, "RxeDel", "DelChild", "DelChildByID", "IPAMDel"); !slices.Equal(got, want) {
		t.Errorf("DEL calls %v, want %v", got, want)
	}
	if len(stateFiles(t, dir)) != 0 {
		t.Error("the record is left")
	}
}

// relevant keeps the calls of the named seam methods, in order.
func relevant(calls []string, names ...string) []string {
	var out []string
	for _, c := range calls {
		verb, _, _ := strings.Cut(c, " ")
		if slices.Contains(names, verb) {
			out = append(out, c)
		}
	}
	return out
}

// onlyRecord reads the one record in dir.
func onlyRecord(t *testing.T, dir string) *state.Record {
	t.Helper()
	recs, err := state.New(dir).List()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v; want one", recs, err)
	}
	return recs[0]
}

// prevWithRDMA is the result ADD printed, as CHECK's prevResult.
func prevWithRDMA(t *testing.T, w *world) string {
	t.Helper()
	out := strings.TrimSpace(w.stdout.String())
	if out == "" {
		t.Fatal("ADD printed nothing")
	}
	return fmt.Sprint(out)
}

// TestSoftRoCEStatus checks that STATUS says whether ADD can give pods
// their own rxe devices here, and stays successful either way.
func TestSoftRoCEStatus(t *testing.T) {
	cases := []struct {
		name  string
		setup func(w *world)
		want  string
	}{
		{"served", func(*world) {}, "each RDMA pod gets an rxe device of its own"},
		{"kernel without per-netns rxe", func(w *world) { w.noRxe = "kernel 6.1.0: only from Linux 7.1" }, "ADD refuses pods that need RDMA here"},
		{"exclusive mode", func(w *world) { w.mode = rdma.ModeExclusive }, "exclusive netns mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := softRoCEWorld()
			tc.setup(w)
			if err := w.plugin().Status(cmd(t.TempDir(), `,"podSoftRoCE":"eth1"`, "")); err != nil {
				t.Fatalf("STATUS: %v", err)
			}
			if !strings.Contains(w.stderr.String(), tc.want) {
				t.Errorf("STATUS log %q lacks %q", w.stderr.String(), tc.want)
			}
		})
	}
}

// TestSoftRoCENoHostRouteWarning checks that a pod's own rxe device sends
// from the pod netns: ADD does not warn that the host lacks a route to
// the pod's subnet, as it does for a child of a shared device.
func TestSoftRoCENoHostRouteWarning(t *testing.T) {
	w, dir := softRoCEWorld(), t.TempDir()
	if err := w.plugin().Add(cmd(dir, softRoCEConf(filepath.Join(dir, "di.json")), prevResult100)); err != nil {
		t.Fatal(err)
	}
	if got := relevant(w.calls, "HostRouteWarning"); len(got) != 0 {
		t.Errorf("ADD asked for the host route warning: %v", got)
	}
}
