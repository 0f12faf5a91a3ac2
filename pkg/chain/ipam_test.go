package chain

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const withIPAM = `,"podSelection":"all","ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]}`

const prevResult040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"00:16:3e:01:02:03","sandbox":"/var/run/netns/pod"}],
	"ips":[{"version":"4","address":"10.1.0.5/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}`

// The RDMA interface's IPAM addresses follow the primary's, point at the
// RDMA interface entry, and carry version fields at 0.4.0.
func TestIPAMResultShape(t *testing.T) {
	cases := []struct {
		ver, prev   string
		wantVersion string
	}{
		{"0.4.0", prevResult040, "6"},
		{"1.0.0", prevResult100, ""},
	}
	for _, tc := range cases {
		t.Run(tc.ver, func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
			args := cmd(t.TempDir(), withIPAM, tc.prev)
			args.StdinData = []byte(strings.Replace(string(args.StdinData), `"1.0.0"`, `"`+tc.ver+`"`, 1))
			if err := w.plugin().Add(args); err != nil {
				t.Fatal(err)
			}
			var res struct {
				CNIVersion string `json:"cniVersion"`
				Interfaces []struct{ Name string }
				IPs        []struct {
					Version   string
					Address   string
					Interface *int
				}
				Routes []struct{ Dst string }
			}
			if err := json.Unmarshal(w.stdout.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			last := len(res.IPs) - 1
			if res.CNIVersion != tc.ver || last < 1 || res.IPs[0].Address != "10.1.0.5/24" ||
				res.IPs[last].Address != "fd00:77::5/64" || res.IPs[last].Version != tc.wantVersion ||
				res.Interfaces[*res.IPs[last].Interface].Name != "rdma0" || res.Routes[len(res.Routes)-1].Dst != "fd00:88::/64" {
				t.Errorf("result %s", w.stdout.String())
			}
			want := []string{"IPAMAdd c1 rdma0", "Configure rdma0 fd00:77::5/64 dad=false", "HostRouteWarning veth0"}
			if got := w.calls[len(w.calls)-3:]; !reflect.DeepEqual(got, want) {
				t.Errorf("calls %v", w.calls)
			}
		})
	}
}

// A failure after the lease was taken releases it; DEL releases it too, also
// when the netns is gone; a DEL after a crash between record and lease
// releases it as well.
func TestIPAMRelease(t *testing.T) {
	t.Run("configure fails", func(t *testing.T) {
		w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"Configure": errors.New("dad failed")}}
		dir := t.TempDir()
		wantCode(t, w.plugin().Add(cmd(dir, withIPAM, prevResult100)), CodeLinkSetup, "dad failed")
		if got := w.calls[len(w.calls)-2:]; !reflect.DeepEqual(got, []string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}) {
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
		if got := w.calls[len(w.calls)-2:]; !reflect.DeepEqual(got, []string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}) {
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

// Every lease is on record before its IPAM ADD runs: each link's record,
// written before its host changes, names its lease (the one a DEL after a
// crash must release).
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

// A crash after a link was recorded with its lease but before the IPAM ran
// leaves a lease flag without a lease: DEL releases it (an IPAM's DEL of a
// lease it does not hold changes nothing) and gives the host side back.
func TestDelAfterCrashBeforeIPAM(t *testing.T) {
	for _, tc := range []struct {
		name string
		link state.Link
		want []string
	}{
		{"child being created", state.Link{Device: "rxe0", Kind: "macvlan", IPAM: true, Step: stepChildAdding,
			HostLink: netdev.HostLink{HostName: "veth0", PodName: "rdma0"}},
			[]string{"IPAMDel c1 rdma0", "DelChild /var/run/netns/pod rdma0 "}},
		{"netdev and device recorded, nothing moved", state.Link{Device: "mlx5_0", Kind: "moved", IPAM: true, RDMAMoved: true,
			Step: stepNetdevMoving, HostLink: netdev.HostLink{HostName: "eth1", PodName: "rdma0", MAC: "02:00:00:00:00:01"}},
			[]string{"IPAMDel c1 rdma0", "ReturnToHost mlx5_0 /var/run/netns/pod", "RestoreToHost eth1 /var/run/netns/pod"}},
	} {
		t.Run(tc.name, func(t *testing.T) { delAfterCrash(t, tc.link, withIPAM, tc.want) })
	}
}
