package chain

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func wantCode(t *testing.T, err error, code uint, substr string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != code {
		t.Fatalf("want CNI error %d, got %#v", code, err)
	}
	if !strings.Contains(te.Msg+" "+te.Details, substr) {
		t.Errorf("error %q / %q does not mention %q", te.Msg, te.Details, substr)
	}
}

func stateFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "attachments", "*.json"))
	return files
}

// noKeyLocks fails the test when a key lock file is left in dir: every
// call removes its own as it lets go.
func noKeyLocks(t *testing.T, dir string) {
	t.Helper()
	if files, _ := filepath.Glob(filepath.Join(dir, "keys", "*")); len(files) != 0 {
		t.Errorf("key lock files left: %v", files)
	}
}

func TestAddNeedsPrevResult(t *testing.T) {
	w := &world{}
	err := w.plugin().Add(cmd(t.TempDir(), "", ""))
	wantCode(t, err, types.ErrInvalidNetworkConfig, "chained")
}

// TestPassThroughEveryVersion checks that a pod allocated nothing passes
// through at every CNI version, unchanged, without touching the RDMA
// subsystem.
func TestPassThroughEveryVersion(t *testing.T) {
	prev := map[string]string{
		"0.3.0": `{"cniVersion":"0.3.0","interfaces":[{"name":"eth0","mac":"00:16:3e:01:02:03","sandbox":"/ns"}],"ips":[{"version":"4","address":"10.1.0.5/24","interface":0}]}`,
		"0.3.1": `{"cniVersion":"0.3.1","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"version":"6","address":"fd00::5/64","interface":0}]}`,
		"0.4.0": `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"version":"4","address":"10.1.0.5/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}`,
		"1.0.0": prevResult100,
		"1.1.0": `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"address":"10.1.0.5/24","interface":0}],"routes":[{"dst":"0.0.0.0/0","mtu":1400}]}`,
	}
	for ver, in := range prev {
		t.Run(ver, func(t *testing.T) {
			w := &world{}
			dir := t.TempDir()
			args := cmd(dir, "", in)
			args.StdinData = []byte(strings.Replace(string(args.StdinData), `"1.0.0"`, `"`+ver+`"`, 1))
			if err := w.plugin().Add(args); err != nil {
				t.Fatal(err)
			}
			assertSameJSON(t, w.stdout.Bytes(), []byte(in))
			if !reflect.DeepEqual(w.calls, []string{"Lookup " + config.DefaultPodResourcesSocket + " default/p1"}) {
				t.Errorf("calls = %v, want only the kubelet lookup", w.calls)
			}
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("pass-through wrote state %v", f)
			}
		})
	}
}

func assertSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output %q: %v", got, err)
	}
	_ = json.Unmarshal(want, &w)
	// 1.x results always carry a dns object; older ones omit empty fields.
	if m, ok := g.(map[string]any); ok {
		if d, ok := m["dns"].(map[string]any); ok && len(d) == 0 {
			delete(m, "dns")
		}
	}
	if m, ok := w.(map[string]any); ok {
		if d, ok := m["dns"].(map[string]any); ok && len(d) == 0 {
			delete(m, "dns")
		}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("result changed:\n got %s\nwant %s", got, want)
	}
}

func TestAddKubelet(t *testing.T) {
	t.Run("unreachable is try-again naming the socket", func(t *testing.T) {
		w := &world{podErr: podres.ErrUnavailable}
		dir := t.TempDir()
		err := w.plugin().Add(cmd(dir, `,"podResourcesSocket":"/run/kl.sock"`, prevResult100))
		wantCode(t, err, types.ErrTryAgainLater, "/run/kl.sock")
		if len(stateFiles(t, dir)) != 0 || len(w.calls) != 1 {
			t.Errorf("changed something: calls %v", w.calls)
		}
	})
	t.Run("unreachable with passThrough passes through, warned", func(t *testing.T) {
		w := &world{podErr: fmt.Errorf("dial: %w", podres.ErrUnavailable), allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_0"}}}}
		dir := t.TempDir()
		if err := w.plugin().Add(cmd(dir, `,"kubeletUnreachable":"passThrough"`, prevResult100)); err != nil {
			t.Fatal(err)
		}
		assertSameJSON(t, w.stdout.Bytes(), []byte(prevResult100))
		if len(stateFiles(t, dir)) != 0 || len(w.calls) != 1 {
			t.Errorf("changed something: calls %v", w.calls)
		}
		if !strings.Contains(w.stderr.String(), "passed through without RDMA") || !strings.Contains(w.stderr.String(), "default/p1") {
			t.Errorf("no warning naming the pod: %q", w.stderr.String())
		}
	})
	t.Run("kubelet answering an error is try-again even with passThrough", func(t *testing.T) {
		w := &world{podErr: errors.New("rpc error: code = ResourceExhausted desc = rejected by rate limit")}
		err := w.plugin().Add(cmd(t.TempDir(), `,"kubeletUnreachable":"passThrough"`, prevResult100))
		wantCode(t, err, types.ErrTryAgainLater, "did not answer")
	})
	t.Run("refused by the rate limit past the budget is try-again naming it", func(t *testing.T) {
		w := &world{podErr: fmt.Errorf("ask kubelet (120 attempts in 30s): %w at /run/kl.sock: rpc error", podres.ErrRateLimited)}
		err := w.plugin().Add(cmd(t.TempDir(), `,"kubeletUnreachable":"passThrough"`, prevResult100))
		wantCode(t, err, types.ErrTryAgainLater, "kept refusing the lookup with its rate limit")
	})
	t.Run("no pod identity passes through", func(t *testing.T) {
		w := &world{}
		args := cmd(t.TempDir(), "", prevResult100)
		args.Args = ""
		if err := w.plugin().Add(args); err != nil || len(w.calls) != 0 {
			t.Fatalf("err %v calls %v", err, w.calls)
		}
	})
	for _, tt := range []struct {
		name string
		w    *world
		want string
	}{
		{"kubelet reports nothing: passed through, said why", &world{},
			"kubelet reports no RDMA device for the pod: passed through"},
		{"kubelet does not know the pod: passed through, said so", &world{podUnknown: true},
			"kubelet does not know the pod: passed through without RDMA"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.w.plugin().Add(cmd(t.TempDir(), "", prevResult100)); err != nil {
				t.Fatal(err)
			}
			assertSameJSON(t, tt.w.stdout.Bytes(), []byte(prevResult100))
			log := tt.w.stderr.String()
			if !strings.Contains(log, "level=INFO msg=\""+tt.want+"\"") || !strings.Contains(log, "pod=default/p1 ") {
				t.Errorf("log %q: want an INFO line %q naming the pod", log, tt.want)
			}
		})
	}
	t.Run("hostile CNI_ARGS rejected", func(t *testing.T) {
		w := &world{}
		args := cmd(t.TempDir(), "", prevResult100)
		args.Args = "K8S_POD_NAMESPACE=a;K8S_POD_NAME=../../etc"
		wantCode(t, w.plugin().Add(args), types.ErrInvalidNetworkConfig, "K8S_POD_NAME")
	})
}

func TestAddKernel(t *testing.T) {
	cases := []struct {
		name  string
		w     *world
		conf  string
		code  uint
		words string
	}{
		{"no RDMA", &world{modeErr: rdma.ErrNoRDMA}, `,"podSelection":"all"`, CodeNoRDMA, "no RDMA"},
		{"mode mismatch", &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}},
			`,"podSelection":"all","mode":"exclusive"`, CodeModeMismatch, `"shared"`},
		{"no device offered", &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}},
			`,"podSelection":"all","devices":["mlx5_0"]`, CodeNoDevice, "no RDMA device"},
		{"driver cannot move", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"MoveToNetns": &rdma.UnsupportedMoveError{Device: "rxe0", Driver: "rdma_rxe", Err: errors.New("operation not supported")}}},
			`,"podSelection":"all"`, CodeMoveUnsupported, "rdma_rxe"},
		{"soft-RoCE refused before any change", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"CheckMovable": rdma.CheckMovable(rxe("rxe0", "veth0"), "6.12.0")}},
			`,"podSelection":"all"`, CodeMoveUnsupported, "rdma_rxe"},
		{"uplink refused, named with what it carries", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("rxe0", "eth0")},
			uplinks: map[string]string{"eth0": "the node's IPv4 default route"}},
			`,"podSelection":"all"`, CodeNodeUplink, "eth0 of RDMA device rxe0 carries the node's IPv4 default route"},
		{"uplink asked for by name is refused", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("rxe0", "eth0"), rxe("rxe1", "eth1")},
			uplinks: map[string]string{"eth0": "the node's IPv6 default route"}},
			`,"podSelection":"all","deviceID":"rxe0"`, CodeNodeUplink, "IPv6 default route"},
		{"uplinks unreadable", &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("rxe0", "eth0")},
			failOn: map[string]error{"NodeUplinks": errors.New("netlink: permission denied")}},
			`,"podSelection":"all"`, CodeLinkSetup, "permission denied"},
		{"no ipvlan", &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
			failOn: map[string]error{"AddChild": errors.New("ipvlan: link kind not supported")}},
			`,"podSelection":"all"`, CodeLinkSetup, "ipvlan"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := tc.w.plugin().Add(cmd(dir, tc.conf, prevResult100))
			wantCode(t, err, tc.code, tc.words)
			if f := stateFiles(t, dir); len(f) != 0 {
				t.Errorf("failed ADD left state %v", f)
			}
			if tc.code == CodeNodeUplink && len(filterCalls(tc.w.calls, "MoveToPod"))+len(filterCalls(tc.w.calls, "MoveToNetns")) != 0 {
				t.Errorf("an uplink was moved: %v", tc.w.calls)
			}
		})
	}
}

func TestAddSharedThenDel(t *testing.T) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0"), rxe("rxe1", "veth1")},
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"7"}}}}
	dir := t.TempDir()
	p := w.plugin()
	if err := p.Add(cmd(dir, "", prevResult100)); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Interfaces []struct{ Name, Mac, Sandbox string }
	}
	if err := json.Unmarshal(w.stdout.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Interfaces) != 4 || res.Interfaces[2].Name != "rdma0" || res.Interfaces[3].Name != "rdma1" ||
		res.Interfaces[3].Sandbox != "/var/run/netns/pod" || res.Interfaces[2].Mac != "02:00:00:00:00:00" {
		t.Errorf("result interfaces = %+v", res.Interfaces)
	}
	if len(stateFiles(t, dir)) != 1 {
		t.Fatal("no state recorded")
	}
	w.calls = nil
	for i := 0; i < 2; i++ {
		if err := p.Del(cmd(dir, "", "")); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	want := []string{"DelChild /var/run/netns/pod rdma1 02:00:00:00:00:01", "DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}
	if !reflect.DeepEqual(w.calls, want) {
		t.Errorf("DEL calls = %v, want %v", w.calls, want)
	}
	if len(stateFiles(t, dir)) != 0 {
		t.Error("state left after DEL")
	}
}

// TestDrain checks that a draining network passes every new pod through
// without asking kubelet, even one with a deviceID, while an attachment
// recorded before still gets its DEL; STATUS needs no kubelet.
func TestDrain(t *testing.T) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"rxe0"}}}}
	dir := t.TempDir()
	p := w.plugin()
	if err := p.Add(cmd(dir, "", prevResult100)); err != nil || len(stateFiles(t, dir)) != 1 {
		t.Fatalf("ADD before draining: %v", err)
	}
	w.calls, w.failOn = nil, map[string]error{"Probe": podres.ErrUnavailable}
	drain := `,"drain":true`
	for _, conf := range []string{drain, drain + `,"deviceID":"rxe0"`} {
		w.stdout.Reset()
		args := cmd(dir, conf, prevResult100)
		args.ContainerID = "c2"
		if err := p.Add(args); err != nil {
			t.Fatal(err)
		}
		assertSameJSON(t, w.stdout.Bytes(), []byte(prevResult100))
	}
	if err := p.Status(cmd(dir, drain, "")); err != nil {
		t.Errorf("STATUS while draining: %v", err)
	}
	if len(w.calls) != 0 || len(stateFiles(t, dir)) != 1 {
		t.Fatalf("draining ADD did something: calls %v", w.calls)
	}
	if err := p.Del(cmd(dir, drain, "")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.calls, []string{"DelChild /var/run/netns/pod rdma0 02:00:00:00:00:00"}) || len(stateFiles(t, dir)) != 0 {
		t.Errorf("DEL while draining: calls %v, state %v", w.calls, stateFiles(t, dir))
	}
}

func TestAddSharedLinkNone(t *testing.T) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")}}
	dir := t.TempDir()
	if err := w.plugin().Add(cmd(dir, `,"podSelection":"all","sharedLink":{"type":"none"}`, prevResult100)); err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, w.stdout.Bytes(), []byte(prevResult100))
	if len(stateFiles(t, dir)) != 1 {
		t.Error("sharedLink none must still record the attachment")
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
