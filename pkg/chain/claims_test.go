package chain

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const draDriver = "rdma-chain.github.io"

func claimDev(claim, device string) podres.ClaimDevice {
	return podres.ClaimDevice{ClaimNamespace: "default", ClaimName: claim, Driver: draDriver, Pool: "node1", Device: device}
}

func foreignDev(claim, device string) podres.ClaimDevice {
	return podres.ClaimDevice{ClaimNamespace: "default", ClaimName: claim, Driver: "dranet.gke.io", Pool: "node1", Device: device}
}

// TestAddFromClaims checks a pod's RDMA devices from DRA claims: the
// served driver's devices map to the node's RDMA devices by DRA name; with
// device-plugin devices too, the pod gets both; another driver's device is
// never touched (not offered to the pod, and a pod with only such devices
// passes through); ambiguous or unknown DRA names are refused before
// anything changes.
func TestAddFromClaims(t *testing.T) {
	devs := []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5_1", "eth2"), rxe("mlx5_2", "eth3")}
	cases := []struct {
		name      string
		mode      rdma.Mode
		devices   []rdma.Device
		allocs    []podres.Allocation
		claims    []podres.ClaimDevice
		foreign   []podres.ClaimDevice
		conf      string
		wantDevs  []string // RDMA devices attached, in order
		wantCode  uint     // 0: success
		wantWords string
	}{
		{name: "claim only", mode: rdma.ModeExclusive, claims: []podres.ClaimDevice{claimDev("nic", "mlx5-1")}, wantDevs: []string{"mlx5_1"}},
		{name: "two claims, shared", mode: rdma.ModeShared,
			claims: []podres.ClaimDevice{claimDev("a", "mlx5-2"), claimDev("b", "mlx5-0")}, wantDevs: []string{"mlx5_2", "mlx5_0"}},
		{name: "device plugin and claim: both", mode: rdma.ModeShared,
			allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}},
			claims: []podres.ClaimDevice{claimDev("nic", "mlx5-2")}, wantDevs: []string{"mlx5_0", "mlx5_2"}},
		{name: "device plugin and claim name the same device: once", mode: rdma.ModeExclusive,
			allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_1"}}},
			claims: []podres.ClaimDevice{claimDev("nic", "mlx5-1")}, wantDevs: []string{"mlx5_1"}},
		{name: "synthetic device-plugin ID and claim: the claimed device", mode: rdma.ModeShared,
			allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"3"}}},
			claims: []podres.ClaimDevice{claimDev("nic", "mlx5-2")}, wantDevs: []string{"mlx5_2"}},
		{name: "only another driver's device: passed through", mode: rdma.ModeExclusive,
			foreign: []podres.ClaimDevice{foreignDev("net", "eth1")}},
		{name: "another driver's device is not offered for podSelection-free shared picks", mode: rdma.ModeShared,
			allocs:  []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"7"}}},
			foreign: []podres.ClaimDevice{foreignDev("net", "eth2")}, wantDevs: []string{"mlx5_0", "mlx5_2"}},
		{name: "another driver's netdev named by a device plugin: refused", mode: rdma.ModeExclusive,
			allocs:  []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}},
			foreign: []podres.ClaimDevice{foreignDev("net", "eth1")}, wantCode: CodeNoDevice, wantWords: `"mlx5_0" matches no RDMA device offered`},
		{name: "another driver claims the same device by RDMA name: refused", mode: rdma.ModeExclusive,
			claims:  []podres.ClaimDevice{claimDev("nic", "mlx5-0")},
			foreign: []podres.ClaimDevice{foreignDev("net", "mlx5-0")}, wantCode: CodeNoDevice, wantWords: "matches no RDMA device offered"},
		{name: "unknown DRA device", mode: rdma.ModeExclusive, claims: []podres.ClaimDevice{claimDev("nic", "mlx5-9")},
			wantCode: CodeNoDevice, wantWords: `"mlx5-9" matches no RDMA device offered`},
		{name: "DRA device not in the conf's devices", mode: rdma.ModeExclusive, conf: `,"devices":["mlx5_0"]`,
			claims: []podres.ClaimDevice{claimDev("nic", "mlx5-1")}, wantCode: CodeNoDevice, wantWords: "matches no RDMA device offered"},
		{name: "ambiguous DRA name", mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("mlx5_0", "eth1"), rxe("mlx5-0", "eth2")},
			claims: []podres.ClaimDevice{claimDev("nic", "mlx5-0")}, wantCode: CodeNoDevice, wantWords: "names 2 RDMA devices"},
		{name: "malformed DRA device", mode: rdma.ModeExclusive, claims: []podres.ClaimDevice{claimDev("nic", "../../x")},
			wantCode: CodeNoDevice, wantWords: "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodeDevs := devs
			if tc.devices != nil {
				nodeDevs = tc.devices
			}
			w := &world{mode: tc.mode, devices: nodeDevs, allocs: tc.allocs, claims: tc.claims, foreign: tc.foreign}
			dir := t.TempDir()
			err := w.plugin().Add(cmd(dir, tc.conf, prevResult100))
			if tc.wantCode != 0 {
				wantCode(t, err, tc.wantCode, tc.wantWords)
				if f := stateFiles(t, dir); len(f) != 0 {
					t.Errorf("refused ADD left state %v", f)
				}
				if moved := w.callsNamed("MoveToPod", "AddChild"); len(moved) != 0 {
					t.Errorf("refused ADD touched devices: %v", moved)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			files := stateFiles(t, dir)
			if tc.wantDevs == nil {
				if len(files) != 0 {
					t.Errorf("passed-through pod has state %v", files)
				}
				if moved := w.callsNamed("MoveToPod", "AddChild"); len(moved) != 0 {
					t.Errorf("passed-through pod touched devices: %v", moved)
				}
				return
			}
			rec := readOnlyRecord(t, files)
			var got []string
			for _, l := range rec.Links {
				got = append(got, l.Device)
			}
			if !reflect.DeepEqual(got, tc.wantDevs) {
				t.Errorf("attached %v, want %v", got, tc.wantDevs)
			}
			if len(rec.Claims) != len(tc.claims) {
				t.Fatalf("record claims %+v, want %d", rec.Claims, len(tc.claims))
			}
			for i, c := range tc.claims {
				if rc := rec.Claims[i]; rc.Name != c.ClaimName || rc.Device != c.Device || rc.Driver != c.Driver || rc.RDMADevice == "" {
					t.Errorf("record claim %d = %+v, want %+v mapped", i, rc, c)
				}
			}
		})
	}
}

// TestClaimShareRecordedAndDelWithoutKubelet checks that a share of a
// device with consumable capacity is recorded with its share ID; DEL
// gives it back from the record alone, without kubelet.
func TestClaimShareRecordedAndDelWithoutKubelet(t *testing.T) {
	share := claimDev("nic", "mlx5-0")
	share.ShareID = "8c1d"
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("mlx5_0", "eth1")}, claims: []podres.ClaimDevice{share}}
	dir := t.TempDir()
	p := w.plugin()
	if err := p.Add(cmd(dir, "", prevResult100)); err != nil {
		t.Fatal(err)
	}
	rec := readOnlyRecord(t, stateFiles(t, dir))
	want := []state.Claim{{Namespace: "default", Name: "nic", Driver: draDriver, Pool: "node1", Device: "mlx5-0", ShareID: "8c1d", RDMADevice: "mlx5_0"}}
	if !reflect.DeepEqual(rec.Claims, want) {
		t.Errorf("record claims %+v, want %+v", rec.Claims, want)
	}
	w.calls, w.podErr = nil, os.ErrClosed
	if err := p.Del(cmd(dir, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := w.callsNamed("Lookup", "DelChild"); !reflect.DeepEqual(got, []string{"DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}) {
		t.Errorf("DEL calls %v: want the child removed and no kubelet call", got)
	}
}

func readOnlyRecord(t *testing.T, files []string) *state.Record {
	t.Helper()
	if len(files) != 1 {
		t.Fatalf("records %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec state.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return &rec
}

// callsNamed returns the recorded calls whose name is one of names.
func (w *world) callsNamed(names ...string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.calls {
		for _, n := range names {
			if strings.HasPrefix(c, n+" ") {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestSoftRoCEFromClaims checks that on a podSoftRoCE network a served
// claim device named after the NIC (rdma.SoftRoCEDRAName, as pkg/dra
// publishes it) gives the pod its own rxe device, recorded in the claim
// with its share; any other DRA name (another NIC's, another RDMA
// device's, the pod's rxe device's own) is refused before any change.
func TestSoftRoCEFromClaims(t *testing.T) {
	name := rdma.SoftRoCEName("rdmanet", "c1", "eth0")
	cases := []struct {
		name     string
		claims   []podres.ClaimDevice
		allocs   []podres.Allocation
		foreign  []podres.ClaimDevice
		wantCode uint
		want     string // the refusal's words
	}{
		{name: "the NIC's soft-RoCE", claims: []podres.ClaimDevice{claimDev("nic", "softroce-eth1")}},
		{name: "with a device plugin's synthetic ID: once", claims: []podres.ClaimDevice{claimDev("nic", "softroce-eth1")},
			allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"7"}}}},
		{name: "another NIC's soft-RoCE", claims: []podres.ClaimDevice{claimDev("nic", "softroce-eth2")},
			wantCode: CodeNoDevice, want: `"softroce-eth2" of claim default/nic (driver rdma-chain.github.io) is not softroce-eth1`},
		{name: "an RDMA device of the node", claims: []podres.ClaimDevice{claimDev("nic", "rxe0")},
			wantCode: CodeNoDevice, want: `"rxe0" of claim default/nic (driver rdma-chain.github.io) is not softroce-eth1`},
		{name: "the pod's rxe device's own DRA name", claims: []podres.ClaimDevice{claimDev("nic", rdma.DRADeviceName(name))},
			wantCode: CodeNoDevice, want: "is not softroce-eth1"},
		{name: "a synthetic-looking DRA name", claims: []podres.ClaimDevice{claimDev("nic", "3")},
			wantCode: CodeNoDevice, want: "is not softroce-eth1"},
		{name: "the NIC allocated by another driver too", claims: []podres.ClaimDevice{claimDev("nic", "softroce-eth1")},
			foreign: []podres.ClaimDevice{foreignDev("net", "eth1")}, wantCode: CodeNoDevice, want: "its NIC eth1 is also allocated to this pod by driver"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, dir := softRoCEWorld(), t.TempDir()
			w.allocs, w.claims, w.foreign = tc.allocs, tc.claims, tc.foreign
			if tc.claims[0].Device == "softroce-eth1" && tc.wantCode == 0 {
				w.claims[0].ShareID = "8c1d"
			}
			err := w.plugin().Add(cmd(dir, softRoCEConf(dir+"/di.json"), prevResult100))
			if tc.wantCode != 0 {
				wantCode(t, err, tc.wantCode, tc.want)
				if got := relevant(w.calls, "AddChild", "RxeAdd"); len(got) != 0 || len(stateFiles(t, dir)) != 0 {
					t.Errorf("refused ADD changed %v, records %v", got, stateFiles(t, dir))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := relevant(w.calls, "RxeAdd"); len(got) != 1 || !strings.HasPrefix(got[0], "RxeAdd "+name+" ") {
				t.Errorf("rxe devices made %v, want %s once", got, name)
			}
			rec := onlyRecord(t, dir)
			want := []state.Claim{{Namespace: "default", Name: "nic", Driver: draDriver, Pool: "node1", Device: "softroce-eth1", ShareID: "8c1d", RDMADevice: name}}
			if len(rec.Links) != 1 || rec.Links[0].Device != name || !reflect.DeepEqual(rec.Claims, want) {
				t.Errorf("record links %+v claims %+v, want %s and %+v", rec.Links, rec.Claims, name, want)
			}
		})
	}
}
