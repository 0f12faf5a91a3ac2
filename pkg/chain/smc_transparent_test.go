package chain

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// smcr.transparent picks tcp2smc, the BPF socket hook or nothing, and
// onUnsupported decides whether an explicit choice the kernel cannot serve
// fails ADD with 108.
func TestSMCTransparentModes(t *testing.T) {
	noHook := errors.New("no update_socket_protocol hook (Linux >= 6.6)")
	cases := []struct {
		name          string
		transparent   string
		onUnsupported string
		tcp2smc       bool
		hookErr       error
		want          string // recorded Transparent, or "108"
	}{
		{"auto prefers tcp2smc", "auto", "warn", true, nil, "tcp2smc"},
		{"auto uses the hook", "auto", "warn", false, nil, "bpf"},
		{"auto logs when neither", "auto", "fail", false, noHook, ""},
		{"tcp2smc present", "tcp2smc", "fail", true, nil, "tcp2smc"},
		{"tcp2smc absent warns", "tcp2smc", "warn", false, nil, ""},
		{"tcp2smc absent fails", "tcp2smc", "fail", false, nil, "108"},
		{"bpf even with tcp2smc", "bpf", "fail", true, nil, "bpf"},
		{"bpf unsupported warns", "bpf", "warn", false, noHook, ""},
		{"bpf unsupported fails", "bpf", "fail", false, noHook, "108"},
		{"off", "off", "fail", true, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := erdmaWorld(t)
			w.tcp2smc = tc.tcp2smc
			w.failOn = map[string]error{"HookSupported": tc.hookErr}
			conf := annotated("true") +
				`,"smcr":{"transparent":"` + tc.transparent + `","onUnsupported":"` + tc.onUnsupported + `"}`
			args := cmd(dir, conf, prevResult100)
			err := w.plugin().Add(args)
			if tc.want == "108" {
				wantCode(t, err, CodeSMC, tc.transparent)
				if len(stateFiles(t, dir)) != 0 || len(w.hooked) != 0 {
					t.Errorf("failed ADD left records %v, hook %v", stateFiles(t, dir), w.hooked)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rec, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			if rec.SMC == nil || rec.SMC.Transparent != tc.want {
				t.Fatalf("recorded %+v, want transparent %q", rec.SMC, tc.want)
			}
			if listed := w.hooked[rec.NetNSIno]; listed != (tc.want == "bpf") {
				t.Errorf("hook lists the pod: %v", listed)
			}
			// The fake hook loads the program for the first netns listed.
			if logged := strings.Contains(w.stderr.String(), "programLoaded=true"); logged != (tc.want == "bpf") {
				t.Errorf("ADD logged programLoaded=true: %v; log:\n%s", logged, w.stderr.String())
			}
			if err := w.plugin().Check(cmd(dir, conf, w.stdout.String())); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if tc.want == "bpf" {
				delete(w.hooked, rec.NetNSIno)
				wantCode(t, w.plugin().Check(cmd(dir, conf, w.stdout.String())), CodeCheckFailed, "SMC socket hook")
				w.hooked[rec.NetNSIno] = true
			}
			delPod(t, w, dir, "c1", conf)
			if len(w.hooked) != 0 {
				t.Errorf("DEL left the pod listed: %v", w.hooked)
			}
		})
	}
}
