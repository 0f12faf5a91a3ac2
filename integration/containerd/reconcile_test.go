//go:build containerd

package containerd

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/install"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// testReconcile checks that `rdma-chain-ops reconcile --cri-socket` asks this
// containerd which sandboxes live. A record whose sandbox was removed behind
// the plugin's back (here: one containerd never had) is released; the record
// of a live sandbox is kept. The records are planted (shared mode, no link:
// this kernel has no RDMA to attach), the liveness is the runtime's.
func testReconcile(t *testing.T, e *env) {
	live, err := e.cri.run(callCtx(t), e.pod("reconcile-live", nil))
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	defer func() {
		_ = e.cri.stop(callCtx(t), live)
		_ = e.cri.remove(callCtx(t), live)
	}()
	store := state.New(e.cni.state)
	old := time.Now().Add(-time.Hour).UTC()
	for _, id := range []string{live, "0123456789abcdef-gone"} {
		rec := &state.Record{Network: netName, ContainerID: id, IfName: "eth0", Mode: rdma.ModeShared, CreatedAt: old,
			Pod: state.Pod{Namespace: podNamespace, Name: "reconcile-" + id[:4]}}
		if err := store.Put(rec); err != nil {
			t.Fatal(err)
		}
	}
	opsBin := builtBinary(t, install.OpsBinary)
	cmd := exec.Command(opsBin, "reconcile", "--net-name", netName, "--data-dir", e.cni.state,
		"--cri-socket", e.d.socket, "--cni-bin-dir", e.cni.bin, "--min-age", "0s", "--once")
	out, err := cmd.CombinedOutput()
	t.Logf("$ rdma-chain-ops reconcile --cri-socket ...\n%s", out)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if !strings.Contains(string(out), `msg="released an attachment" attachment="`+netName+"/0123456789abcdef-gone/eth0") {
		t.Errorf("the gone sandbox's attachment was not released")
	}
	recs, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ContainerID != live {
		t.Errorf("records after reconcile: %v, want only the live sandbox %s", recs, live)
	}
	for _, r := range recs {
		if err := store.Delete(r.Key()); err != nil {
			t.Error(err)
		}
	}
}
