package chain

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const withIPAM = `,"podSelection":"all","ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]}`

const prevResult040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"00:16:3e:01:02:03","sandbox":"/var/run/netns/pod"}],
	"ips":[{"version":"4","address":"10.1.0.5/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}`

// resultShape is what the shape tests read of a printed result.
type resultShape struct {
	CNIVersion string `json:"cniVersion"`
	Interfaces []struct {
		Name, Mac, Sandbox, PciID string
		Mtu                       int
	}
	IPs []struct {
		Version, Address, Gateway string
		Interface                 *int
	}
	Routes []struct{ Dst string }
}

// TestIPAMResultShape checks that by default the result gains rdma0's
// interface entry only (mtu and pciID at 1.1.0); with reportIPs also its
// addresses, pointing at it, without gateway, and its routes other than
// default routes. The primary's part is unchanged either way.
func TestIPAMResultShape(t *testing.T) {
	for _, ver := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		for _, mode := range []rdma.Mode{rdma.ModeShared, rdma.ModeExclusive} {
			for _, report := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/reportIPs=%v", ver, mode, report), func(t *testing.T) {
					dev := rxe("mlx5_0", "veth0")
					dev.Driver, dev.PCI = "mlx5_core", "0000:3b:00.0"
					w := &world{mode: mode, devices: []rdma.Device{dev}}
					conf := withIPAM + fmt.Sprintf(`,"reportIPs":%v`, report)
					if mode == rdma.ModeShared {
						conf += `,"sharedLink":{"type":"macvlan"}`
					}
					prev := map[string]string{"0.4.0": prevResult040}[ver]
					if prev == "" {
						prev = strings.Replace(prevResult100, `"1.0.0"`, `"`+ver+`"`, 1)
					}
					args := cmd(t.TempDir(), conf, prev)
					args.StdinData = []byte(strings.Replace(string(args.StdinData), `"1.0.0"`, `"`+ver+`"`, 1))
					if err := w.plugin().Add(args); err != nil {
						t.Fatal(err)
					}
					var res resultShape
					if err := json.Unmarshal(w.stdout.Bytes(), &res); err != nil {
						t.Fatal(err)
					}
					assertResultShape(t, res, ver, mode, report)
					if t.Failed() {
						t.Logf("result %s", w.stdout.String())
					}
				})
			}
		}
	}
}

func assertResultShape(t *testing.T, res resultShape, ver string, mode rdma.Mode, report bool) {
	t.Helper()
	last := res.Interfaces[len(res.Interfaces)-1]
	wantMAC, wantMTU := "02:00:00:00:00:00", 1450
	if mode == rdma.ModeExclusive {
		wantMAC, wantMTU = "02:00:00:00:00:01", 1500
	}
	wantPCI := "0000:3b:00.0"
	if ver != "1.1.0" {
		wantMTU, wantPCI = 0, ""
	}
	if res.CNIVersion != ver || last.Name != "rdma0" || last.Sandbox != "/var/run/netns/pod" || last.Mac != wantMAC ||
		last.Mtu != wantMTU || last.PciID != wantPCI {
		t.Errorf("rdma0 entry %+v, want mac %s mtu %d pciID %q", last, wantMAC, wantMTU, wantPCI)
	}
	if res.IPs[0].Address != "10.1.0.5/24" || res.IPs[0].Gateway != "10.1.0.1" || res.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("primary's IPs or routes changed: %+v %+v", res.IPs, res.Routes)
	}
	if !report {
		if len(res.IPs) != 1 || len(res.Routes) != 1 {
			t.Errorf("default result lists rdma0's addresses or routes: %+v %+v", res.IPs, res.Routes)
		}
		return
	}
	wantVersion := map[string]string{"0.4.0": "6"}[ver]
	if len(res.IPs) != 2 || len(res.Routes) != 2 {
		t.Fatalf("reportIPs result: IPs %+v routes %+v", res.IPs, res.Routes)
	}
	ip := res.IPs[1]
	if ip.Address != "fd00:77::5/64" || ip.Version != wantVersion || ip.Gateway != "" || ip.Interface == nil ||
		*ip.Interface != len(res.Interfaces)-1 || res.Routes[1].Dst != "fd00:88::/64" {
		t.Errorf("reported rdma0 IP %+v routes %+v", ip, res.Routes)
	}
}

// TestIPAMCalls checks that the delegated IPAM's calls are the same
// with and without reportIPs.
func TestIPAMCalls(t *testing.T) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	if err := w.plugin().Add(cmd(t.TempDir(), withIPAM, prevResult100)); err != nil {
		t.Fatal(err)
	}
	want := []string{"IPAMAdd c1 rdma0", "Configure rdma0 fd00:77::5/64 dad=false", "HostRouteWarning veth0"}
	if got := w.calls[len(w.calls)-3:]; !reflect.DeepEqual(got, want) {
		t.Errorf("calls %v", w.calls)
	}
}

// TestIPAMRelease checks that a failure after the lease was taken releases it
// and deletes the child by name and kind (its MAC is recorded with the final
// record); DEL releases it too, also when the netns is gone; a DEL after a
// crash between record and lease releases it as well.
func TestIPAMRelease(t *testing.T) {
	t.Run("configure fails", func(t *testing.T) {
		w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"Configure": errors.New("dad failed")}}
		dir := t.TempDir()
		wantCode(t, w.plugin().Add(cmd(dir, withIPAM, prevResult100)), CodeLinkSetup, "dad failed")
		if got := w.calls[len(w.calls)-2:]; !reflect.DeepEqual(got, []string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 "}) {
			t.Errorf("rollback %v", w.calls)
		}
		if len(stateFiles(t, dir)) != 0 {
			t.Error("state left")
		}
	})
	t.Run("ipam fails", func(t *testing.T) {
		w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"IPAMAdd": errors.New("range full")}}
		wantCode(t, w.plugin().Add(cmd(t.TempDir(), withIPAM, prevResult100)), CodeIPAM, "range full")
		if got := w.calls[len(w.calls)-2:]; !reflect.DeepEqual(got, []string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 "}) {
			t.Errorf("rollback %v", w.calls)
		}
	})
	t.Run("DEL with netns gone", func(t *testing.T) {
		w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
		dir := t.TempDir()
		if err := w.plugin().Add(cmd(dir, withIPAM, prevResult100)); err != nil {
			t.Fatal(err)
		}
		w.calls = nil
		args := cmd(dir, withIPAM, "")
		args.Netns = ""
		for i := 0; i < 2; i++ {
			if err := w.plugin().Del(args); err != nil {
				t.Fatal(err)
			}
		}
		if want := []string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}; !reflect.DeepEqual(w.calls, want) {
			t.Errorf("DEL calls %v", w.calls)
		}
	})
	t.Run("GC passes the runtime list and the RDMA interface names as valid", func(t *testing.T) {
		w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
		dir := t.TempDir()
		for _, id := range []string{"keep", "stale"} {
			args := cmd(dir, withIPAM, prevResult100)
			args.ContainerID = id
			if err := w.plugin().Add(args); err != nil {
				t.Fatal(err)
			}
		}
		w.calls = nil
		gc := cmd(dir, withIPAM+`,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]`, "")
		if err := w.plugin().GC(gc); err != nil {
			t.Fatal(err)
		}
		want := []string{"IPAMDel stale rdma0", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00", "IPAMGC [{keep eth0} {keep rdma0}]"}
		if !reflect.DeepEqual(w.calls, want) {
			t.Errorf("GC calls %v", w.calls)
		}
	})
}

// TestLeaseRecordedBeforeIPAM checks that every lease is on record before
// its IPAM ADD runs: each link's record, written before its host changes,
// names its lease (the one a DEL after a crash must release).
func TestLeaseRecordedBeforeIPAM(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    *world
	}{
		{"shared", &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1")}}},
		{"exclusive", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5_1", "eth2")},
			allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0", "mlx5_1"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var flagged []int
			tc.w.onIPAM = func() {
				rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"})
				if err != nil {
					t.Errorf("no record while the IPAM runs: %v", err)
					return
				}
				flagged = append(flagged, leases(rec))
			}
			conf := strings.Replace(withIPAM, `"podSelection":"all"`, `"devices":["rxe0","rxe1","mlx5_0","mlx5_1"]`, 1)
			if tc.name == "shared" {
				conf = withIPAM
			}
			if err := tc.w.plugin().Add(cmd(dir, conf, prevResult100)); err != nil {
				t.Fatal(err)
			}
			if want := []int{2, 2}; !reflect.DeepEqual(flagged, want) {
				t.Errorf("leases on record at each IPAM ADD: %v, want %v", flagged, want)
			}
		})
	}
}

// TestDelAfterCrashBeforeIPAM checks that a crash after a link was
// recorded with its lease but before the IPAM ran leaves a lease flag
// without a lease: DEL releases it (an IPAM's DEL of a lease it does not
// hold changes nothing) and gives the host side back.
func TestDelAfterCrashBeforeIPAM(t *testing.T) {
	for _, tc := range []struct {
		name string
		link state.Link
		want []string
	}{
		{"child being created", state.Link{Device: "rxe0", Kind: state.LinkMACVlan, IPAM: true, Step: state.StepChildAdding,
			HostLink: state.HostLink{HostName: "veth0", PodName: "rdma0"}},
			[]string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 "}},
		{"netdev and device recorded, nothing moved", state.Link{Device: "mlx5_0", Kind: state.LinkMoved, IPAM: true, RDMAMoved: true,
			Step: state.StepNetdevMoving, HostLink: state.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}},
			[]string{"IPAMDel c1 rdma0", "ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
	} {
		t.Run(tc.name, func(t *testing.T) { delAfterCrash(t, tc.link, withIPAM, tc.want) })
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

// TestDelLeaseWithoutIPAMConf checks that a conf that lost its ipam
// section does not block DEL forever.
func TestDelLeaseWithoutIPAMConf(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	if err := w.plugin().Add(cmd(dir, withIPAM, prevResult100)); err != nil {
		t.Fatal(err)
	}
	if err := w.plugin().Del(cmd(dir, "", "")); err != nil || len(stateFiles(t, dir)) != 0 {
		t.Fatalf("DEL: %v", err)
	}
	if !strings.Contains(w.stderr.String(), "not released") {
		t.Error("no warning about the unreleased lease")
	}
}
