package chain

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	w, result := added(t, dir, "c1")
	conf := `,"podSelection":"all"`
	t.Run("ok", func(t *testing.T) {
		w.calls = nil
		if err := w.plugin().Check(cmd(dir, conf, result)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(w.calls, []string{"CheckInPod /var/run/netns/pod rdma0 02:00:00:00:00:00"}) {
			t.Errorf("calls %v", w.calls)
		}
	})
	t.Run("interface missing from result", func(t *testing.T) {
		wantCode(t, w.plugin().Check(cmd(dir, conf, prevResult100)), CodeCheckFailed, "rdma0")
	})
	t.Run("link gone from pod", func(t *testing.T) {
		w.failOn = map[string]error{"CheckInPod": errors.New("no link rdma0")}
		defer func() { w.failOn = nil }()
		wantCode(t, w.plugin().Check(cmd(dir, conf, result)), CodeCheckFailed, "no link rdma0")
	})
	t.Run("no prevResult", func(t *testing.T) {
		wantCode(t, w.plugin().Check(cmd(dir, conf, "")), types.ErrInvalidNetworkConfig, "prevResult")
	})
	t.Run("pass-through pod has nothing to check", func(t *testing.T) {
		args := cmd(dir, conf, prevResult100)
		args.ContainerID = "other"
		if err := w.plugin().Check(args); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCheckExclusiveDevice(t *testing.T) {
	dir := t.TempDir()
	w := &world{mode: rdma.ModeExclusive, devices: []rdma.Device{rxe("mlx5_0", "eth1")}}
	if err := w.plugin().Add(cmd(dir, `,"podSelection":"all"`, prevResult100)); err != nil {
		t.Fatal(err)
	}
	result := w.stdout.String()
	if err := w.plugin().Check(cmd(dir, `,"podSelection":"all"`, result)); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	w.failOn = map[string]error{"InNetns": errors.New("absent")}
	wantCode(t, w.plugin().Check(cmd(dir, `,"podSelection":"all"`, result)), CodeCheckFailed, "mlx5_0 is not in the pod netns")
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

func TestStatus(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		w := &world{}
		if err := w.plugin().Status(cmd(t.TempDir(), "", "")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("kubelet unreachable", func(t *testing.T) {
		w := &world{failOn: map[string]error{"Probe": errors.New("dial unix: no such file")}}
		wantCode(t, w.plugin().Status(cmd(t.TempDir(), `,"podResourcesSocket":"/run/k.sock"`, "")), CodeNotAvailable, "/run/k.sock")
		if !reflect.DeepEqual(w.calls, []string{"Probe /run/k.sock"}) {
			t.Errorf("calls = %v, want the conf's socket probed", w.calls)
		}
	})
	t.Run("kubelet unreachable with passThrough stays ready", func(t *testing.T) {
		w := &world{failOn: map[string]error{"Probe": fmt.Errorf("probe: %w", podres.ErrUnavailable)}}
		if err := w.plugin().Status(cmd(t.TempDir(), `,"kubeletUnreachable":"passThrough"`, "")); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.stderr.String(), "kubeletUnreachable: passThrough") {
			t.Errorf("no warning on stderr: %q", w.stderr.String())
		}
	})
	t.Run("kubelet answering an error with passThrough is not ready", func(t *testing.T) {
		w := &world{failOn: map[string]error{"Probe": errors.New("rpc error: code = Internal")}}
		wantCode(t, w.plugin().Status(cmd(t.TempDir(), `,"kubeletUnreachable":"passThrough"`, "")), CodeNotAvailable, "not reachable")
	})
	// A kubelet that refuses (its rate limit) or answers late is there:
	// ADD waits for it, and the node stays ready.
	for name, err := range map[string]error{
		"rate limited": fmt.Errorf("probe: %w at /s: rpc error: code = ResourceExhausted", podres.ErrRateLimited),
		"slow":         fmt.Errorf("probe: %w at /s: rpc error: code = DeadlineExceeded", podres.ErrBusy),
	} {
		t.Run("kubelet "+name+" stays ready", func(t *testing.T) {
			w := &world{failOn: map[string]error{"Probe": err}}
			if err := w.plugin().Status(cmd(t.TempDir(), "", "")); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(w.stderr.String(), "busy: ADD waits for it") {
				t.Errorf("no warning on stderr: %q", w.stderr.String())
			}
		})
	}
	t.Run("podSelection all needs no kubelet", func(t *testing.T) {
		w := &world{failOn: map[string]error{"Probe": errors.New("unreachable")}}
		if err := w.plugin().Status(cmd(t.TempDir(), `,"podSelection":"all"`, "")); err != nil {
			t.Fatal(err)
		}
	})
	// STATUS names the transparent-SMC mechanism an annotated pod gets and
	// stays ready without it (the node's other pods need no SMC).
	for _, c := range []struct {
		name, conf string
		offer      smc.Offer
		want       string
	}{
		{"socket hook", "", smc.Offer{SMC: true, IPPROTOSMC: true, SocketHook: true},
			"level=INFO msg=\"SMC-R: transparent SMC for annotated pods\" plugin=rdma-chain verb=STATUS container=c1 pod=default/p1 mechanism=socket_hook transparent=auto offer=smc,ipproto_smc,socket_hook"},
		{"no SMC", `,"smcr":{"onUnsupported":"fail"}`, smc.Offer{},
			"level=WARN msg=\"SMC-R: annotated pods get no transparent SMC (onUnsupported fail)\" plugin=rdma-chain verb=STATUS container=c1 pod=default/p1 mechanism=no_smc transparent=auto offer=no_smc"},
		{"bpf without the hook", `,"smcr":{"transparent":"bpf"}`, smc.Offer{SMC: true, SocketHookError: "no BTF"},
			"level=WARN msg=\"SMC-R: annotated pods get no transparent SMC (onUnsupported warn)\" plugin=rdma-chain verb=STATUS container=c1 pod=default/p1 mechanism=none transparent=bpf offer=smc"},
		{"SMC-R disabled", `,"smcr":{"enabled":false}`, smc.Offer{SMC: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &world{offer: c.offer}
			if err := w.plugin().Status(cmd(t.TempDir(), `,"podSelection":"all"`+c.conf, "")); err != nil {
				t.Fatal(err)
			}
			got := w.stderr.String()
			if c.want == "" {
				if strings.Contains(got, "SMC-R") || slices.Contains(w.calls, "Offer /sys/fs/bpf/rdma-chain") {
					t.Errorf("SMC-R disabled, yet STATUS probed or logged it: %v %q", w.calls, got)
				}
				return
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("log %q lacks %q", got, c.want)
			}
		})
	}
	// The probe runs the hook binary: STATUS reuses it for a while, per
	// bpffsDir, and a file it cannot parse is probed again.
	t.Run("SMC probe kept", func(t *testing.T) {
		dir := t.TempDir()
		w := &world{offer: smc.Offer{SMC: true}}
		for _, conf := range []string{``, ``, `,"smcr":{"bpffsDir":"/sys/fs/bpf/other"}`} {
			if err := w.plugin().Status(cmd(dir, `,"podSelection":"all"`+conf, "")); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cache-smc-offer.json"), []byte(`{"bpffsDir":"/sys/fs/bpf/other","offer":{},"x":1}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w.plugin().Status(cmd(dir, `,"podSelection":"all","smcr":{"bpffsDir":"/sys/fs/bpf/other"}`, "")); err != nil {
			t.Fatal(err)
		}
		want := []string{"Offer /sys/fs/bpf/rdma-chain", "Offer /sys/fs/bpf/other", "Offer /sys/fs/bpf/other"}
		if !reflect.DeepEqual(w.calls, want) {
			t.Errorf("calls %v, want %v", w.calls, want)
		}
	})
	t.Run("state dir not writable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		_ = os.WriteFile(file, nil, 0o600)
		w := &world{}
		wantCode(t, w.plugin().Status(cmd(file+"/sub", "", "")), CodeNotAvailable, "not writable")
	})
}
