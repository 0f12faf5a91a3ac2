package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const (
	bootA = "9f5defee-91a3-4099-b60f-178d4c2a437b"
	bootB = "0c4e2a57-51d7-4a8c-9d0e-4d1b7c1a9e11"
)

// TestFirstPassAfterBootReleasesEarlierBoot checks that the daemon's
// first pass after a boot releases the attachments made in an earlier
// boot, whose pods died in the reboot, before it holds the SMC socket
// hook again, and says how many; it keeps this boot's and those of
// unknown boot (left to the passes), and does it once.
func TestFirstPassAfterBootReleasesEarlierBoot(t *testing.T) {
	boot := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(boot, []byte(bootB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old1, old2 := rec("rdmanet", "old1", "/run/netns/old1", time.Hour), rec("rdmanet", "old2", "/run/netns/old2", time.Hour)
	old1.BootID, old2.BootID = bootA, bootA
	old1.SMC = &state.SMC{PnetID: "P", Device: "erdma_0", IBPort: 1, PodIfName: "eth0", HostEntry: true, PodEntry: true, Transparent: "bpf"}
	cur := rec("rdmanet", "cur", "/run/netns/cur", time.Hour)
	cur.BootID = bootB
	unknown := rec("rdmanet", "unknown", "/run/netns/unknown", time.Hour)
	n := newFakeNode(t, old1, old2, cur, unknown)
	r := n.reconciler("")
	r.bootIDPath, r.holdSMCHook = boot, true
	r.nets = []conflist.Network{{Name: "rdmanet", DataDir: n.dir,
		Stdin: []byte(`{"cniVersion":"1.0.0","name":"rdmanet","type":"rdma-chain","smcr":{"transparent":"bpf"}}`)}}

	ctx, cancel := context.WithCancel(context.Background())
	passes := 0
	r.reload = func() error {
		if passes++; passes == 3 {
			cancel()
		}
		return nil
	}
	done := make(chan struct{})
	go func() { r.loop(ctx, time.Millisecond, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("loop did not end with its context")
	}

	want := []string{"del old1", "del old2", "hold /sys/fs/bpf/rdma-chain"}
	if !slices.Equal(n.order, want) {
		t.Errorf("DELs and holds %q, want %q\n%s", n.order, want, n.out.String())
	}
	if got := testutil.ToFloat64(r.metrics.Releases.WithLabelValues("rdmanet", metrics.ReasonEarlierBoot)); got != 2 {
		t.Errorf("releases of reason %s: %v, want 2", metrics.ReasonEarlierBoot, got)
	}
	said := `msg="released the attachments of an earlier boot" released=2 problems=0 bootId=` + bootB
	if c := strings.Count(n.out.String(), said); c != 1 {
		t.Errorf("said %q %d times, want once:\n%s", said, c, n.out.String())
	}
	recs, err := state.New(n.dir).List()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, r := range recs {
		kept = append(kept, r.ContainerID)
	}
	slices.Sort(kept)
	if !slices.Equal(kept, []string{"cur", "unknown"}) {
		t.Errorf("kept %v, want cur and unknown", kept)
	}
}

// TestEarlierBootNeedsTheBootID checks that without a readable boot id
// nothing is released as of an earlier boot: it is said, and counted as
// a problem.
func TestEarlierBootNeedsTheBootID(t *testing.T) {
	old := rec("rdmanet", "old", "/run/netns/old", time.Hour)
	old.BootID = bootA
	n := newFakeNode(t, old)
	r := n.reconciler("")
	r.bootIDPath = filepath.Join(t.TempDir(), "missing")
	if released, problems := r.releaseEarlierBoot(); released != 0 || problems != 1 || len(n.deleted) != 0 {
		t.Errorf("released %d (%v), %d problems; want none and one problem", released, n.deleted, problems)
	}
	if !strings.Contains(n.out.String(), "cannot read the kernel's boot id") {
		t.Errorf("log:\n%s", n.out.String())
	}
}
