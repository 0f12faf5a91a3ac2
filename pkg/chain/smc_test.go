package chain

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

func annotated(value string) string {
	return `,"podSelection":"all","sharedLink":{"type":"none"},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"` + value + `"}}`
}

func erdmaWorld(t *testing.T) *world {
	return &world{mode: rdma.ModeShared, devices: []rdma.Device{erdma(t, "erdma_0", "eth1", "00:16:3e:0a:0b:0c")}}
}

func addPod(t *testing.T, w *world, dir, id, conf string) {
	t.Helper()
	args := cmd(dir, conf, prevResult100)
	args.ContainerID = id
	if err := w.plugin().Add(args); err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
}

func delPod(t *testing.T, w *world, dir, id, conf string) {
	t.Helper()
	args := cmd(dir, conf, "")
	args.ContainerID = id
	if err := w.plugin().Del(args); err != nil {
		t.Fatalf("DEL %s: %v", id, err)
	}
}

var (
	hostEntry = smc.PnetEntry{PnetID: "00163E0A0B0C", IBName: "erdma_0", IBPort: 1}
	podEntry  = smc.PnetEntry{PnetID: "00163E0A0B0C", EthName: "eth0"}
)

// TestSMCEntriesRefCounted checks that entries live until the last
// annotated pod on the device goes; the pod entry goes with its pod.
func TestSMCEntriesRefCounted(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	addPod(t, w, dir, "a", annotated("true"))
	w.stdout.Reset()
	addPod(t, w, dir, "b", annotated("TRUE"))
	if !reflect.DeepEqual(w.pnet[""], []smc.PnetEntry{hostEntry}) || !reflect.DeepEqual(w.pnet["/var/run/netns/pod"], []smc.PnetEntry{podEntry}) {
		t.Fatalf("tables %v", w.pnet)
	}
	if got := filterCalls(w.calls, "TCP2SMC"); len(got) != 2 {
		t.Errorf("tcp2smc calls %v", got)
	}
	result := w.stdout.String()
	args := cmd(dir, annotated("true"), result)
	args.ContainerID = "b"
	if err := w.plugin().Check(args); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	delPod(t, w, dir, "a", annotated("true"))
	if len(w.pnet[""]) != 1 {
		t.Errorf("host entry gone while pod b uses it: %v", w.pnet)
	}
	delPod(t, w, dir, "b", annotated("true"))
	if len(w.pnet[""]) != 0 {
		t.Errorf("host entry left after the last pod: %v", w.pnet)
	}
	delPod(t, w, dir, "b", annotated("true"))
}

func TestSMCCheckFindsMissingEntry(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	addPod(t, w, dir, "c1", annotated("true"))
	result := w.stdout.String()
	w.pnet["/var/run/netns/pod"] = nil
	wantCode(t, w.plugin().Check(cmd(dir, annotated("true"), result)), CodeCheckFailed, "eth0")
}

// TestSMCAdoptsExistingPnetID checks that a port that already carries
// another PNETID keeps it: the pod entry uses it, and the plugin never
// removes an entry it did not write.
func TestSMCAdoptsExistingPnetID(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.pnet = map[string][]smc.PnetEntry{"": {{PnetID: "FABRIC1", IBName: "erdma_0", IBPort: 1}}}
	addPod(t, w, dir, "c1", annotated("true"))
	if want := []smc.PnetEntry{{PnetID: "FABRIC1", EthName: "eth0"}}; !reflect.DeepEqual(w.pnet["/var/run/netns/pod"], want) {
		t.Errorf("pod table %v", w.pnet)
	}
	delPod(t, w, dir, "c1", annotated("true"))
	if len(w.pnet[""]) != 1 {
		t.Errorf("removed a pnet entry it did not write: %v", w.pnet)
	}
}

func TestSMCUnavailable(t *testing.T) {
	unavailable := map[string]error{"EnsurePnet": smc.ErrUnavailable}
	t.Run("warn", func(t *testing.T) {
		w, dir := erdmaWorld(t), t.TempDir()
		w.failOn = unavailable
		addPod(t, w, dir, "c1", annotated("true"))
		if !strings.Contains(w.stderr.String(), "SMC-R requested but unavailable") {
			t.Errorf("no warning: %s", w.stderr.String())
		}
	})
	t.Run("fail rolls back", func(t *testing.T) {
		w, dir := erdmaWorld(t), t.TempDir()
		w.failOn = unavailable
		conf := strings.Replace(annotated("true"), `"podSelection"`, `"smcr":{"onUnsupported":"fail"},"podSelection"`, 1)
		wantCode(t, w.plugin().Add(cmd(dir, conf, prevResult100)), CodeSMC, "not available")
		if len(stateFiles(t, dir)) != 0 {
			t.Error("state left")
		}
	})
}

// TestSMCPodEntryFailureRollsBack checks that a pod entry that cannot be
// written undoes the host entry it just wrote.
func TestSMCPodEntryFailureRollsBack(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	w.failOn = map[string]error{"EnsurePnet": errors.New("EPERM")}
	w.failNth = map[string]int{"EnsurePnet": 2}
	wantCode(t, w.plugin().Add(cmd(dir, annotated("true"), prevResult100)), CodeSMC, "eth0")
	if len(w.pnet[""]) != 0 || len(stateFiles(t, dir)) != 0 {
		t.Errorf("left %v", w.pnet)
	}
}

func TestSMCAnnotationValues(t *testing.T) {
	for _, v := range []string{"false", "maybe", "1"} {
		w, dir := erdmaWorld(t), t.TempDir()
		addPod(t, w, dir, "c1", annotated(v))
		if len(w.pnet) != 0 || len(filterCalls(w.calls, "EnsurePnet")) != 0 {
			t.Errorf("%q wrote %v", v, w.pnet)
		}
	}
	// Warned about even for a pod that passes through.
	w := &world{}
	if err := w.plugin().Add(cmd(t.TempDir(), strings.Replace(annotated("maybe"), `"podSelection":"all",`, "", 1), prevResult100)); err != nil {
		t.Fatal(err)
	}
	if strings.Count(w.stderr.String(), "ignored") != 1 {
		t.Errorf("hostile value warned about %d times", strings.Count(w.stderr.String(), "ignored"))
	}
	conf := strings.Replace(annotated("true"), `"podSelection"`, `"smcr":{"ueid":"RDMACHAIN-1","pnetId":"fab1"},"podSelection"`, 1)
	w = erdmaWorld(t)
	addPod(t, w, t.TempDir(), "c1", conf)
	if got := filterCalls(w.calls, "EnsureUEID"); !reflect.DeepEqual(got, []string{"EnsureUEID RDMACHAIN-1"}) || w.pnet[""][0].PnetID != "FAB1" {
		t.Errorf("calls %v tables %v", w.calls, w.pnet)
	}
}

func TestPnetIDFor(t *testing.T) {
	cases := []struct {
		conf string
		dev  rdma.Device
		want string
	}{
		{"abc", rdma.Device{Name: "erdma_0"}, "ABC"},
		{"", erdma(t, "erdma_0", "eth1", "00:16:3e:0a:0b:0c"), "00163E0A0B0C"},
		{"", rdma.Device{Name: "mlx5_0", NodeGUID: "b8ce:f603:00a1:2b3c"}, "MLX50"},
		{"", rdma.Device{Name: "a_very_long_device_name_0"}, "AVERYLONGDEVICEN"},
	}
	for _, tc := range cases {
		if got := pnetIDFor(tc.conf, tc.dev); got != tc.want || !smc.ValidPnetID(got) {
			t.Errorf("%q %s: %q, want %q", tc.conf, tc.dev.Name, got, tc.want)
		}
	}
}

func TestSMCWarnsWithoutIPv4(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"00:16:3e:0a:0b:0c","sandbox":"/var/run/netns/pod"}],"ips":[{"address":"fd00::5/64","interface":0}]}`
	if err := w.plugin().Add(cmd(dir, annotated("true"), prev)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.stderr.String(), "no IPv4 address") || len(w.pnet[""]) != 1 {
		t.Errorf("log %s", w.stderr.String())
	}
}

// TestSMCGCRemovesHostEntry checks that GC of every annotated pod
// removes the init_net entry even though ownership moved between
// records on the way.
func TestSMCGCRemovesHostEntry(t *testing.T) {
	w, dir := erdmaWorld(t), t.TempDir()
	addPod(t, w, dir, "a", annotated("true"))
	addPod(t, w, dir, "b", annotated("true"))
	if err := w.plugin().GC(cmd(dir, annotated("true")+`,"cni.dev/valid-attachments":[]`, "")); err != nil {
		t.Fatal(err)
	}
	if len(w.pnet[""]) != 0 || len(stateFiles(t, dir)) != 0 {
		t.Errorf("left %v", w.pnet)
	}
}

// TestSMCRNotAllowed checks that an annotated pod that smcr.enabled or
// smcr.namespaces does not allow gets no pnet entry, no UEID and no socket
// hook; ADD succeeds with a warning naming why.
func TestSMCRNotAllowed(t *testing.T) {
	for _, tc := range []struct{ name, smcr, words string }{
		{"turned off", `"enabled":false`, "smcr.enabled is false"},
		{"other namespace", `"namespaces":["team-a"]`, `namespace \"default\" is not in smcr.namespaces`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, dir := erdmaWorld(t), t.TempDir()
			conf := annotated("true") + `,"smcr":{"transparent":"bpf",` + tc.smcr + `}`
			addPod(t, w, dir, "a", conf)
			if len(w.pnet[""]) != 0 || len(w.pnet["/var/run/netns/pod"]) != 0 {
				t.Errorf("pnet tables %v", w.pnet)
			}
			for _, call := range w.calls {
				if strings.HasPrefix(call, "Hook") || strings.HasPrefix(call, "TCP2SMC") || strings.HasPrefix(call, "EnsureUEID") {
					t.Errorf("SMC-R set up: %v", w.calls)
				}
			}
			if !strings.Contains(w.stderr.String(), tc.words) {
				t.Errorf("log %q does not say %q", w.stderr.String(), tc.words)
			}
			delPod(t, w, dir, "a", conf)
		})
	}
}
