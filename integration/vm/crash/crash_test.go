// Package crash is the crash matrix of exclusive mode on the kernel's real
// RDMA core, run by the VM tier in its guests (scenario crash-rdma, with a
// second NIC and the simrdma test device on it): the plugin, built with
// -tags failpoint, is killed (SIGKILL) after each host change of ADD and
// of DEL, and DEL or GC must then leave the node exactly as it was.
//
// simrdma0, bound to the virtio-net NIC eth0, is moved with eth0 into an
// SMC-R pod, chained after ptp + host-local, with host-local IPv6 on
// rdma0:
//  1. one traced ADD and DEL name the failpoints;
//  2. every ADD failpoint: ADD killed there leaves something rdma-chain
//     owns, then DEL (cniVersion 1.0.0) or GC (1.1.0, then the primary's
//     own DEL), and the node equals its reading from before;
//  3. every DEL failpoint: ADD ok, DEL killed there, then DEL again or GC.
//
// Every failpoint runs in both matrices: a case that may not run could
// hide a leak, so there is no budget, and a guest too slow for all of them
// fails the boot's time limit.
package crash

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

const (
	nic       = "eth0"     // the virtio-net NIC simrdma0 is bound to
	device    = "simrdma0" // its RDMA device
	dataDir   = "/run/rdma-chain-crash"
	rdmaIPAM  = "/run/ipam-crash-rdma"
	ptpIPAM   = "/run/ipam"
	binDir    = "/opt/cni-fp"
	fpBuild   = "/usr/local/bin/rdma-chain-fp"
	refDir    = "/opt/cni/bin"
	traceFile = "/tmp/crash-trace"
)

// The failpoints every kernel's ADD and DEL must pass; the SMC ones where
// the kernel has SMC.
var (
	wantFailpoints = []string{"add-rdma-moved", "add-netdev-moved", "add-ipam-lease-taken",
		"del-rdma-returned", "del-netdev-restored", "del-ipam-lease-released"}
	wantSMCFailpoints = []string{"add-smc-host-entry", "add-smc-pod-entry", "del-smc-released"}
)

var stateDirs = []string{dataDir, rdmaIPAM, ptpIPAM}

// matrix is one guest's run: the chain, its conflists, the NIC the pods'
// links come from and the node the runs must come back to.
type matrix struct {
	c            *guestkit.Chain
	nic          string
	del, gc, ptp *libcni.NetworkConfigList
	base         guestkit.Node
	n, runs      int
	leaked       []string // the cases that left the node changed
}

func TestCrashMatrix(t *testing.T) {
	testenv.VMGuest(t)
	setUpNode(t)
	entry := `"mode":"exclusive","devices":["` + device + `"],"podSelection":"all","dataDir":"` + dataDir + `",` +
		`"smcr":{"transparent":"off","onUnsupported":"` + onUnsupported() + `"},` +
		`"capabilities":{"io.kubernetes.cri.pod-annotations":true},` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:99::/64"}]],"dataDir":"` + rdmaIPAM + `"}`
	want := wantFailpoints
	if guestkit.HasSMC() {
		want = append(want, wantSMCFailpoints...)
	}
	m := newMatrix(t, nic, entry)
	m.run(t, want)
	if mode, err := rdma.New().NetnsMode(); err != nil || mode != rdma.ModeExclusive {
		t.Errorf("netns mode after the matrix: %v %v, want exclusive", mode, err)
	}
}

// run discovers the failpoints of one traced ADD and DEL (want among
// them) and kills the plugin at each, in both matrices.
func (m *matrix) run(t *testing.T, want []string) {
	addFP, delFP := m.discover(t, want)
	start := time.Now()
	for _, mode := range []string{"DEL", "GC"} {
		for _, fp := range addFP {
			t.Run("add-"+fp+"-then-"+mode, func(t *testing.T) { m.addKilled(t, fp, mode) })
		}
		for _, fp := range delFP {
			t.Run("del-"+fp+"-then-"+mode, func(t *testing.T) { m.delKilled(t, fp, mode) })
		}
	}
	t.Logf("crash matrix: failpoints discovered: %d (ADD %d, DEL %d); runs: %d; leaks: %d %v; %.0f s",
		len(addFP)+len(delFP), len(addFP), len(delFP), m.runs, len(m.leaked), m.leaked, time.Since(start).Seconds())
	if want := 2 * (len(addFP) + len(delFP)); m.runs != want {
		t.Errorf("%d runs for %d failpoints in two matrices, want %d", m.runs, len(addFP)+len(delFP), want)
	}
}

// setUpNode switches the RDMA netns mode to exclusive (the guest has no
// netns yet) and sets up the NIC as a node has it.
func setUpNode(t *testing.T) {
	if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
		t.Fatalf("rdma system set netns exclusive: %v", err)
	}
	sys := rdma.New()
	if mode, err := sys.NetnsMode(); err != nil || mode != rdma.ModeExclusive {
		t.Fatalf("netns mode: %v %v, want exclusive", mode, err)
	}
	devs, err := sys.Devices()
	if err != nil || !slices.ContainsFunc(devs, func(d rdma.Device) bool { return d.Name == device && d.Netdev == nic }) {
		t.Fatalf("%s on %s: %v %+v", device, nic, err, devs)
	}
	if err := guestkit.SetUpNIC(nic); err != nil {
		t.Fatal(err)
	}
	if err := guestkit.InstallPlugin(binDir, fpBuild, refDir); err != nil {
		t.Fatalf("install the failpoint build: %v", err)
	}
}

// onUnsupported is the matrix's smcr.onUnsupported: a kernel without SMC
// attaches annotated pods without SMC-R (warn; the smc scenario asserts
// that outcome).
func onUnsupported() string {
	if !guestkit.HasSMC() {
		return "warn"
	}
	return "fail"
}

// newMatrix writes the conflists of rdma-chain's entry: DEL runs at
// 1.0.0, GC at 1.1.0, and the primary alone at 1.1.0 for its own DEL after
// a GC. smcr.transparent off: no socket hook.
func newMatrix(t *testing.T, nic, entry string) *matrix {
	m := &matrix{c: guestkit.NewChain(binDir), nic: nic}
	var err error
	for _, l := range []struct {
		list           **libcni.NetworkConfigList
		version, entry string
	}{{&m.del, "1.0.0", entry}, {&m.gc, "1.1.0", entry}, {&m.ptp, "1.1.0", ""}} {
		if *l.list, err = guestkit.Conflist(l.version, l.entry); err != nil {
			t.Fatalf("conflist %s: %v", l.version, err)
		}
	}
	t.Logf("entry: {%s}", entry)
	return m
}

// newPod makes a sandbox's netns.
func (m *matrix) newPod(t *testing.T) (pod, ns.NetNS) {
	t.Helper()
	m.n++
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	return pod{name: fmt.Sprintf("c%d", m.n), netns: n.Path()}, n
}

// discover runs one traced ADD and DEL and returns the failpoints each
// passed, in order. The first cycle makes the state and IPAM folders;
// from then on the node must come back exactly: that reading is the base.
func (m *matrix) discover(t *testing.T, want []string) (addFP, delFP []string) {
	guestkit.Settled(t, m.nic)
	before, err := guestkit.ReadNode(stateDirs...)
	if err != nil {
		t.Fatal(err)
	}
	p, n := m.newPod(t)
	addFP = m.traced(t, "ADD", func() error { return m.c.Add(m.del, p.kit()) })
	m.checkSMC(t, p)
	delFP = m.traced(t, "DEL", func() error { return m.c.Del(m.del, p.kit()) })
	netnstest.Delete(n)
	t.Logf("ADD failpoints: %v", addFP)
	t.Logf("DEL failpoints: %v", delFP)
	for _, w := range want {
		if !slices.Contains(addFP, w) && !slices.Contains(delFP, w) {
			t.Errorf("failpoint %s not passed by the traced ADD and DEL", w)
		}
	}
	guestkit.Settled(t, m.nic)
	if m.base, err = guestkit.ReadNode(stateDirs...); err != nil {
		t.Fatal(err)
	}
	if b, a := before.WithoutFiles(), m.base.WithoutFiles(); !slices.Equal(b, a) {
		t.Errorf("a normal ADD and DEL changed the node: %s", guestkit.Diff(b, a))
	}
	t.Logf("base: %d facts", len(m.base))
	return addFP, delFP
}

// traced runs call with the failpoint trace on and returns the failpoints
// it passed, each once, in order.
func (m *matrix) traced(t *testing.T, verb string, call func() error) []string {
	t.Helper()
	_ = os.Remove(traceFile)
	m.c.Trace = traceFile
	err := call()
	m.c.Trace = ""
	if err != nil {
		t.Fatalf("traced %s: %v", verb, err)
	}
	b, err := os.ReadFile(traceFile)
	if err != nil {
		t.Fatalf("the %s trace: %v", verb, err)
	}
	var fps []string
	for _, f := range strings.Fields(string(b)) {
		if !slices.Contains(fps, f) {
			fps = append(fps, f)
		}
	}
	return fps
}

// checkSMC checks that the traced pod has its SMC-R pnet entry where the
// kernel has SMC, and no SMC in its record where it has not.
func (m *matrix) checkSMC(t *testing.T, p pod) {
	t.Helper()
	if !guestkit.HasSMC() {
		recs, _ := guestkit.Files(dataDir + "/attachments")
		for _, r := range recs {
			if b, err := os.ReadFile(strings.Fields(r)[1]); err == nil && strings.Contains(string(b), `"smc"`) {
				t.Errorf("record %s has SMC on a kernel without it", r)
			}
		}
		return
	}
	var rows []smc.PnetEntry
	err := smc.Do(p.netns, func(c *smc.Client) (err error) { rows, err = c.PnetDump(); return err })
	if err != nil || !slices.ContainsFunc(rows, func(e smc.PnetEntry) bool { return e.EthName == "eth0" }) {
		t.Errorf("the SMC-R pod's pnet table: %v %v, want an entry for its eth0", rows, err)
	}
}
