package chain

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestSMCTransparentModes checks that smcr.transparent picks tcp2smc, the
// BPF socket hook or nothing, and onUnsupported decides whether an
// explicit choice the kernel cannot serve fails ADD with 108.
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

// TestSMCHookKeyOfReusedInode checks that the hook lists a netns by
// inode, which the kernel gives again once the netns is gone. The DEL of
// a pod whose netns died before it (a later pod at the same path got its
// inode) removes the key only when no live attachment lists it: an SMC-R
// pod that got the inode stays listed, with its pnet rows; a plain pod
// that got it is not listed.
func TestSMCHookKeyOfReusedInode(t *testing.T) {
	const smcr = `,"smcr":{"transparent":"bpf","onUnsupported":"fail"}`
	tests := []struct {
		name      string
		newConf   string // the ADD of the pod that got the inode; "": none
		wantTable bool   // the key stays listed, the new pod's pnet rows stay
	}{
		{"reused by an SMC-R pod", annotated("true") + smcr, true},
		{"reused by a plain pod", annotated("false") + smcr, false},
		{"not reused", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, dir := erdmaWorld(t), t.TempDir()
			w.boot(t, bootA)
			addPod(t, w, dir, "old", annotated("true")+smcr)
			old, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "old", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			// The old pod's netns dies without a DEL; the path and the
			// inode now name another netns (another cookie).
			w.cookieBump = map[string]uint64{"/var/run/netns/pod": 1}
			if tt.newConf != "" {
				addPod(t, w, dir, "new", tt.newConf)
			} else {
				w.gone = map[string]bool{"/var/run/netns/pod": true}
			}
			delPod(t, w, dir, "old", annotated("true")+smcr)
			if listed := w.hooked[old.NetNSIno]; listed != tt.wantTable {
				t.Fatalf("after the old pod's DEL, inode %d listed: %v, want %v", old.NetNSIno, listed, tt.wantTable)
			}
			if !tt.wantTable {
				return
			}
			if !reflect.DeepEqual(w.pnet["/var/run/netns/pod"], []smc.PnetEntry{podEntry}) || !reflect.DeepEqual(w.pnet[""], []smc.PnetEntry{hostEntry}) {
				t.Errorf("the new pod's pnet rows went with the old pod's DEL: %v", w.pnet)
			}
			args := cmd(dir, tt.newConf, prevResult100)
			args.ContainerID = "new"
			if err := w.plugin().Check(args); err != nil {
				t.Errorf("the new pod's CHECK: %v", err)
			}
			delPod(t, w, dir, "new", tt.newConf)
			if len(w.hooked) != 0 || len(w.pnet[""]) != 0 {
				t.Errorf("the new pod's DEL left hook %v, pnet %v", w.hooked, w.pnet)
			}
		})
	}
}
