package crash

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// srNIC is podSoftRoCE's NIC: veth0's peer, which has no RDMA device
// (rxe0 is on veth0).
const srNIC = "veth1"

// softRoCEFailpoints are the host changes of a podSoftRoCE pod's ADD and
// DEL: its macvlan child, its own rxe device and its lease.
var softRoCEFailpoints = []string{"add-child-created", "add-rxe-created", "add-ipam-lease-taken",
	"del-rxe-deleted", "del-child-deleted", "del-ipam-lease-released"}

// TestCrashMatrixSoftRoCE (scenario crash-softroce, shared mode) is the
// crash matrix of podSoftRoCE on veth1: where the kernel serves it (7.3),
// the plugin killed after each host change of ADD and DEL (among them the
// pod's own rxe device made and deleted), then DEL or GC, and the node
// equals its reading from before (its RDMA devices included). Elsewhere
// (6.1, 6.12) ADD is refused with 112 before any host change: no
// failpoint is passed and the node is as before.
func TestCrashMatrixSoftRoCE(t *testing.T) {
	testenv.VMGuest(t)
	served, err := guestkit.SoftRoCEServed()
	if err != nil {
		t.Fatal(err)
	}
	if err := guestkit.SetUpRxe(); err != nil {
		t.Fatal(err)
	}
	if err := guestkit.ModeIs(rdma.ModeShared); err != nil {
		t.Fatal(err)
	}
	if err := guestkit.InstallPlugin(binDir, fpBuild, refDir); err != nil {
		t.Fatalf("install the failpoint build: %v", err)
	}
	entry := `"mode":"shared","podSoftRoCE":"` + srNIC + `","podSelection":"all","dataDir":"` + dataDir + `",` +
		`"smcr":{"transparent":"off","onUnsupported":"` + onUnsupported() + `"},` +
		`"capabilities":{"io.kubernetes.cri.pod-annotations":true},` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:98::/64"}]],"dataDir":"` + rdmaIPAM + `"}`
	m := newMatrix(t, srNIC, entry)
	if served {
		m.run(t, softRoCEFailpoints)
		return
	}
	refusedUntouched(t, m)
}

// refusedUntouched checks that a traced ADD is refused with 112 before
// passing any failpoint, and leaves the node as it was.
func refusedUntouched(t *testing.T, m *matrix) {
	guestkit.Settled(t, m.nic)
	before, err := guestkit.ReadNode(stateDirs...)
	if err != nil {
		t.Fatal(err)
	}
	p, n := m.newPod(t)
	defer netnstest.Delete(n)
	// The trace file exists and is empty before the call: the plugin
	// appends each failpoint it passes.
	if err := os.WriteFile(traceFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m.c.Trace = traceFile
	addErr := m.c.Add(m.del, p.kit())
	m.c.Trace = ""
	guestkit.ExpectCode(t, "add-refused-112", addErr, 112, "7.1")
	if b, err := os.ReadFile(traceFile); err != nil || len(b) != 0 {
		t.Errorf("the refused ADD's trace: %q %v, want it empty", b, err)
	}
	if err := m.c.Del(m.del, p.kit()); err != nil {
		t.Errorf("DEL: %v", err)
	}
	// The plugin's first call makes its state folder and lock: what counts
	// is that no record and no lease is left, and the kernel's side.
	err = guestkit.Poll(30*time.Second, 200*time.Millisecond, func() error {
		got, err := guestkit.ReadNode(stateDirs...)
		if err == nil && !slices.Equal(got.WithoutFiles(), before.WithoutFiles()) {
			err = fmt.Errorf("the node differs from before: %s", guestkit.Diff(before.WithoutFiles(), got.WithoutFiles()))
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	if err := guestkit.RecordCount(dataDir, 0); err != nil {
		t.Error(err)
	}
	if leases, err := guestkit.Files(rdmaIPAM); err != nil || slices.ContainsFunc(leases, func(f string) bool { return strings.HasPrefix(f, "file ") }) {
		t.Errorf("IPAM files after the refused ADD: %v %v", leases, err)
	}
}
