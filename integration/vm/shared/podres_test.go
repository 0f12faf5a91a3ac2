package shared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const (
	podresSock = "/run/kubelet/pod-resources.sock"
	allocFile  = "/run/pods.json"
)

// TestPodResources is the podres scenario: "podSelection":"requested"
// against a fake kubelet serving the pod-resources API (fakekubelet).
// pod1 has rdma/hca allocated and gets rdma0; pod2 has nothing and passes
// through (ptp's result, no rdma0); with the kubelet gone, ADD fails with
// CNI error 11 naming the socket, at cniVersion 0.4.0 and 1.0.0. DRA
// claims (dynamic_resources, as kubelet reports them): pod4's claim
// device rxe0 of the served driver gets rdma0 and is recorded; pod5 with
// only another driver's (dranet's) device on veth0 passes through,
// logged; pod6 with a device-plugin allocation and dranet's device on
// veth0 is refused (103) and rxe0 is left alone.
func TestPodResources(t *testing.T) {
	testenv.VMGuest(t)
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("no soft-RoCE rxe0: no case runs")
	}
	for _, v := range []string{"0.4.0", "1.0.0"} {
		t.Run("v"+v, func(t *testing.T) { podresVersion(t, v) })
	}
	t.Run("dra", podresDRA)
}

func requested(t *testing.T, v, dataDir string) *guestkit.Calls {
	c := guestkit.NewCalls(t, v, dataDir)
	fields := `"mode":"shared","devices":["rxe0"],"podSelection":"requested","podResourcesSocket":"` + podresSock +
		`","resourceNames":["rdma/hca"],"dataDir":"` + dataDir + `","sharedLink":{"type":"ipvlan","mode":"l2"}`
	c.Conf(t, fields)
	t.Logf("cniVersion %s conflist: rdma-chain {%s}", v, fields)
	return c
}

func podresVersion(t *testing.T, v string) {
	c := requested(t, v, "/run/rdma-chain-podres-"+v)
	stop := kubelet(t, `{"pods":[
 {"namespace":"default","name":"pod1","resources":{"rdma/hca":["1"]}},
 {"namespace":"default","name":"pod2","resources":{}},
 {"namespace":"default","name":"pod3","resources":{"rdma/hca":["2"]}}]}`)
	p1, p2, p3 := guestkit.NewPod("podres-", "pod1"), guestkit.NewPod("podres-", "pod2"), guestkit.NewPod("podres-", "pod3")
	guestkit.ExpectOK(t, "add-pod1-requested", c.Add(t, p1))
	guestkit.Check(t, "rdma0-in-pod1", func() error { _, err := guestkit.PodLink(p1.NetNS, "rdma0"); return err })
	guestkit.Check(t, "result-pod1-has-rdma0", func() error {
		r, err := guestkit.ParseResult(c.C.Stdout)
		if err != nil {
			return err
		}
		_, f := r.Iface("rdma0")
		return guestkit.WantField(f, "sandbox", p1.NetNS)
	})
	guestkit.Check(t, "record-pod1", func() error { return c.RecordCount(1) })

	guestkit.ExpectOK(t, "add-pod2-not-requested", c.Add(t, p2))
	guestkit.Check(t, "no-rdma0-in-pod2", func() error { return guestkit.NoLink(p2.NetNS, "rdma0") })
	guestkit.Check(t, "result-pod2-passthrough", func() error { return passThrough(c.C.Stdout) })
	guestkit.Check(t, "no-record-pod2", func() error { return c.RecordCount(1) })
	guestkit.ExpectOK(t, "check-pod1", c.Check(t, p1))
	guestkit.ExpectOK(t, "check-pod2", c.Check(t, p2))
	guestkit.ExpectOK(t, "del-pod2", c.Del(t, p2))
	guestkit.ExpectOK(t, "del-pod1", c.Del(t, p1))
	guestkit.Check(t, "pod1-child-gone", func() error { return guestkit.NoLink(p1.NetNS, "rdma0") })

	// Kubelet gone, stale socket left behind (as after a kubelet crash).
	stop(true)
	guestkit.ExpectCode(t, "kubelet-dead-code-11", c.Add(t, p3), 11, podresSock)
	guestkit.Check(t, "no-rdma0-kubelet-dead", func() error { return guestkit.NoLink(p3.NetNS, "rdma0") })
	guestkit.ExpectOK(t, "del-kubelet-dead", c.Del(t, p3))
	// No socket at all.
	if err := os.Remove(podresSock); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	guestkit.ExpectCode(t, "kubelet-no-socket-code-11", c.AddTo(t, p3), 11, podresSock)
	guestkit.ExpectOK(t, "del-no-socket", c.Del(t, p3))
	guestkit.Check(t, "no-records-left", func() error { return c.RecordCount(0) })
}

// claimUID is pod4's claim's UID: its CDI device is
// rdma-chain.github.io/rdma=<claimUID>-rxe0, in the spec writeClaimSpec
// writes as rdma-chain-dra's Prepare does.
const claimUID = "0b9f6a0e-4c1d-4e57-9a3b-2f6d8c1e5a74"

// writeClaimSpec writes pod4's claim's CDI spec into the plugin's default
// cdiDir, its device's configuration naming the pod's interface roce4.
func writeClaimSpec(t *testing.T) {
	cfg := `{"apiVersion":"rdma-chain.github.io/v1alpha1","kind":"RDMAConfig","ifName":"roce4"}`
	spec, err := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": "rdma-chain.github.io/rdma",
		"devices": []any{map[string]any{"name": claimUID + "-rxe0", "annotations": map[string]string{"rdma-chain.github.io/config": cfg},
			"containerEdits": map[string]any{"deviceNodes": []any{map[string]string{"path": "/dev/infiniband/rdma_cm"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/var/run/cdi/rdma-chain.github.io-" + claimUID + ".json"
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}

func podresDRA(t *testing.T) {
	c := requested(t, "1.0.0", "/run/rdma-chain-podres-dra")
	writeClaimSpec(t)
	stop := kubelet(t, `{"pods":[
 {"namespace":"default","name":"pod4","resources":{},"claims":[{"namespace":"default","name":"nic","driver":"rdma-chain.github.io","pool":"node1","device":"rxe0","cdi":["rdma-chain.github.io/rdma=`+claimUID+`-rxe0"]}]},
 {"namespace":"default","name":"pod5","resources":{},"claims":[{"namespace":"default","name":"net","driver":"dranet.gke.io","pool":"node1","device":"veth0"}]},
 {"namespace":"default","name":"pod6","resources":{"rdma/hca":["3"]},"claims":[{"namespace":"default","name":"net","driver":"dranet.gke.io","pool":"node1","device":"veth0"}]}]}`)
	defer stop(false)
	rxeBefore, err := guestkit.PortView(rxe)
	if err != nil {
		t.Fatal(err)
	}
	p4, p5, p6 := guestkit.NewPod("podres-", "pod4"), guestkit.NewPod("podres-", "pod5"), guestkit.NewPod("podres-", "pod6")
	guestkit.ExpectOK(t, "add-pod4-claim", c.Add(t, p4))
	guestkit.Check(t, "roce4-in-pod4", func() error { _, err := guestkit.PodLink(p4.NetNS, "roce4"); return err })
	guestkit.Check(t, "record-pod4-claim", func() error { return recordHasClaim(c.DataDir) })
	guestkit.ExpectOK(t, "add-pod5-foreign-only", c.Add(t, p5))
	guestkit.Check(t, "no-rdma0-in-pod5", func() error { return guestkit.NoLink(p5.NetNS, "rdma0") })
	guestkit.Check(t, "foreign-device-logged", func() error {
		log := string(c.C.Stderr)
		if i := strings.Index(log, "driver this network does not serve"); i < 0 || !strings.Contains(log[i:], "dranet.gke.io") {
			return fmt.Errorf("no log line for dranet's device: %s", log)
		}
		return nil
	})
	guestkit.ExpectCode(t, "foreign-netdev-refused-103", c.Add(t, p6), 103, "no RDMA device offered")
	guestkit.Check(t, "no-rdma0-in-pod6", func() error { return guestkit.NoLink(p6.NetNS, "rdma0") })
	guestkit.ExpectOK(t, "del-pod6", c.Del(t, p6))
	guestkit.ExpectOK(t, "del-pod5", c.Del(t, p5))
	guestkit.ExpectOK(t, "del-pod4", c.Del(t, p4))
	guestkit.Check(t, "pod4-child-gone", func() error { return guestkit.NoLink(p4.NetNS, "roce4") })
	guestkit.Check(t, "rxe0-unchanged", func() error {
		now, err := guestkit.PortView(rxe)
		if err == nil && now != rxeBefore {
			err = fmt.Errorf("rxe0 now %q, before %q", now, rxeBefore)
		}
		return err
	})
	guestkit.Check(t, "dra-no-records-left", func() error { return c.RecordCount(0) })
}

// kubelet starts the fake kubelet serving the allocations pods (the
// pod-resources API's JSON form) on podresSock; the check kubelet-up
// waits for its socket. stop(kill) ends it: SIGKILL leaves the socket
// behind, as a kubelet crash does.
func kubelet(t *testing.T, pods string) (stop func(kill bool)) {
	t.Helper()
	if err := os.WriteFile(allocFile, []byte(pods), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "/usr/local/bin/fakekubelet", "-socket", podresSock, "-allocations", allocFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	started := cmd.Start()
	done := false
	stop = func(kill bool) {
		if done || started != nil {
			return
		}
		done = true
		if !kill {
			_ = cmd.Process.Signal(os.Interrupt)
		}
		cancel()
		_ = cmd.Wait()
		t.Logf("fakekubelet's log: %s", out.String())
	}
	t.Cleanup(func() { stop(true) })
	guestkit.Check(t, "kubelet-up", func() error {
		if started != nil {
			return fmt.Errorf("fakekubelet: %w", started)
		}
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
			fi, err := os.Stat(podresSock)
			if err == nil && fi.Mode()&os.ModeSocket == 0 {
				err = fmt.Errorf("%s is not a socket", podresSock)
			}
			return err
		})
	})
	return stop
}

// passThrough checks that the result has ptp's eth0 and its 10.99.0.x,
// and nothing of rdma0.
func passThrough(stdout []byte) error {
	if strings.Contains(string(stdout), "rdma0") {
		return fmt.Errorf("pass-through result mentions rdma0: %s", stdout)
	}
	return keepsPrimary(stdout)
}

// recordHasClaim checks that the one record under dataDir holds pod4's
// claim with the RDMA device it resolved to.
func recordHasClaim(dataDir string) error {
	if err := guestkit.RecordCount(dataDir, 1); err != nil {
		return err
	}
	recs, err := guestkit.Records(dataDir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(dataDir + "/attachments/" + recs[0])
	if err != nil {
		return err
	}
	var rec struct {
		Claims []map[string]string `json:"claims"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("record %s: %w", recs[0], err)
	}
	want := []map[string]string{{"namespace": "default", "name": "nic", "driver": "rdma-chain.github.io",
		"pool": "node1", "device": "rxe0", "rdmaDevice": "rxe0"}}
	if !reflect.DeepEqual(rec.Claims, want) {
		return fmt.Errorf("record's claims %v, want %v: %s", rec.Claims, want, b)
	}
	return nil
}
