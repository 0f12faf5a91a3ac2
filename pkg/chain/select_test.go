package chain

import (
	"net"
	"reflect"
	"regexp"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

func names(devs []rdma.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

func TestSelectDevices(t *testing.T) {
	eri0 := erdma(t, "erdma_0", "eth1", "00:16:3e:00:00:01")
	eri1 := erdma(t, "erdma_1", "eth2", "00:16:3e:00:00:02")
	mlx := rdma.Device{Name: "mlx5_0", Netdev: "ens1", PCI: "0000:3b:00.0"}
	offered := []rdma.Device{eri0, eri1, mlx}
	podMAC, _ := net.ParseMAC("00:16:3e:00:00:02")
	cases := []struct {
		name  string
		ids   []string
		mode  rdma.Mode
		busy  map[string]string
		up    map[string]string
		macs  []net.HardwareAddr
		want  []string
		code  uint
		words string
	}{
		{name: "device name", ids: []string{"mlx5_0"}, want: []string{"mlx5_0"}},
		{name: "PCI address", ids: []string{"0000:3b:00.0"}, want: []string{"mlx5_0"}},
		{name: "erdma-controller prefix", ids: []string{"erdma_1/17"}, want: []string{"erdma_1"}},
		{name: "duplicates collapse", ids: []string{"erdma_0/1", "erdma_0/2"}, want: []string{"erdma_0"}},
		{name: "terway eni id, MAC rule", ids: []string{"eni-3"}, macs: []net.HardwareAddr{podMAC}, want: []string{"erdma_1"}},
		{name: "shared-plugin number, shared: all", ids: []string{"217"}, want: []string{"erdma_0", "erdma_1", "mlx5_0"}},
		{name: "no ids, exclusive: first free", mode: rdma.ModeExclusive, busy: map[string]string{"erdma_0": "c9"}, want: []string{"erdma_1"}},
		{name: "no ids, exclusive: a free uplink is passed over", mode: rdma.ModeExclusive, up: map[string]string{"eth1": "x"}, want: []string{"erdma_1"}},
		{name: "no ids, exclusive: only an uplink free, others held", mode: rdma.ModeExclusive, busy: map[string]string{"erdma_1": "c9", "mlx5_0": "c8"},
			up: map[string]string{"eth1": "the node's address"}, code: 11, words: "(erdma_1 by c9, mlx5_0 by c8); try again when one is released (netdev eth1 of erdma_0 carries the node's address)"},
		{name: "no ids, exclusive: only uplinks, none held", mode: rdma.ModeExclusive, up: map[string]string{"eth1": "x", "eth2": "x", "ens1": "x"}, want: []string{"erdma_0"}},
		{name: "no ids, MAC rule wins", macs: []net.HardwareAddr{podMAC}, want: []string{"erdma_1"}},
		{name: "exclusive busy is try-again", ids: []string{"mlx5_0"}, mode: rdma.ModeExclusive, busy: map[string]string{"mlx5_0": "c9"}, code: 11, words: "c9"},
		{name: "all busy", mode: rdma.ModeExclusive, busy: map[string]string{"erdma_0": "a", "erdma_1": "b", "mlx5_0": "c"}, code: 11, words: "erdma_0"},
		{name: "device not offered", ids: []string{"mlx5_7"}, code: CodeNoDevice, words: "mlx5_7"},
		{name: "path in id", ids: []string{"../../sys"}, code: CodeNoDevice, words: "malformed"},
		{name: "malformed id", ids: []string{"a b;c"}, code: CodeNoDevice, words: "malformed"},
		{name: "huge id", ids: []string{string(make([]byte, 500))}, code: CodeNoDevice, words: "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = rdma.ModeShared
			}
			got, err := selectDevices(&request{ids: tc.ids}, selectInput{mode: mode, offered: offered, busy: tc.busy, macs: tc.macs, uplinks: tc.up})
			if tc.code != 0 {
				wantCode(t, err, tc.code, tc.words)
				return
			}
			if err != nil || !reflect.DeepEqual(names(got), tc.want) {
				t.Errorf("got %v %v, want %v", names(got), err, tc.want)
			}
		})
	}
}

func TestOfferedDevices(t *testing.T) {
	all := []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1"), {Name: "siw0"}}
	cases := []struct {
		conf []string
		want []string
	}{
		{nil, []string{"rxe0", "rxe1", "siw0"}},
		{[]string{"rxe1"}, []string{"rxe1"}},
		{[]string{"veth0"}, []string{"rxe0"}},
		{[]string{"eth9"}, nil},
	}
	for _, tc := range cases {
		if got := names(offeredDevices(all, tc.conf)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("devices %v: got %v, want %v", tc.conf, got, tc.want)
		}
	}
}

// TestSelectHeldDeviceInvisible checks that in exclusive mode a device held
// by another pod is invisible from the host: the pod is told to try again,
// not that the device does not exist.
func TestSelectHeldDeviceInvisible(t *testing.T) {
	busy := map[string]string{"mlx5_0": "c9"}
	_, err := selectDevices(&request{}, selectInput{mode: rdma.ModeExclusive, busy: busy})
	wantCode(t, err, 11, "mlx5_0 by c9")
	visible := []rdma.Device{{Name: "mlx5_1", Netdev: "eth2"}}
	_, err = selectDevices(&request{ids: []string{"mlx5_0"}}, selectInput{mode: rdma.ModeExclusive, offered: visible, busy: busy})
	wantCode(t, err, 11, "c9")
	_, err = selectDevices(&request{}, selectInput{mode: rdma.ModeExclusive})
	wantCode(t, err, CodeNoDevice, "no RDMA device")
}

// TestSelectSkipsNetdevLessForChildren checks that a device without a
// netdev cannot parent a child: shared mode skips it.
func TestSelectSkipsNetdevLessForChildren(t *testing.T) {
	offered := []rdma.Device{{Name: "ib0dev"}, {Name: "rxe0", Netdev: "veth0"}}
	got, err := selectDevices(&request{}, selectInput{mode: rdma.ModeShared, offered: offered, needNetdev: true})
	if err != nil || !reflect.DeepEqual(names(got), []string{"rxe0"}) {
		t.Errorf("got %v %v", names(got), err)
	}
	got, _ = selectDevices(&request{}, selectInput{mode: rdma.ModeShared, offered: offered})
	if len(got) != 2 {
		t.Errorf("sharedLink none must keep every device: %v", names(got))
	}
}

// TestSyntheticMatchesExpression checks that synthetic accepts exactly
// what ^(eni-)?[0-9]+$ accepts.
func TestSyntheticMatchesExpression(t *testing.T) {
	re := regexp.MustCompile(`^(eni-)?[0-9]+$`)
	for _, in := range []string{"", "0", "17", "eni-3", "eni-", "eni-eni-3", "eni-3a", "3a", "-3", "ENI-3",
		"eni3", " 3", "erdma_0", "eni-0123456789", "٣"} {
		if got, want := synthetic(in), re.MatchString(in); got != want {
			t.Errorf("synthetic(%q) = %v, want %v", in, got, want)
		}
	}
}
