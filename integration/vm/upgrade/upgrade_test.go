// Package upgrade is the VM tier's upgrade matrix, run in its guests
// (scenarios upgrade-shared, in the shared-mode boot with soft-RoCE rxe0,
// and upgrade-exclusive, in its own boot with simrdma0 on the virtio NIC
// eth0). Two plugin builds: /usr/local/bin/rdma-chain-old (the newest
// release in docs/releases.md, built from its commit) and
// /usr/local/bin/rdma-chain (the tree under test). For old->new (an
// upgrade) and new->old (the rollback of one release), with IPv6 from
// host-local on rdma0 and an SMC-R annotated pod:
//  1. FROM attaches a pod; TO checks it and deletes it; the node equals
//     its reading from before the ADD;
//  2. FROM attaches a pod whose netns then dies without DEL; TO's GC
//     (1.1.0) and ptp's DEL clean up; the node equals its reading again.
//
// The plugin is replaced as the DaemonSet does it: a copy renamed over
// the one in the CNI_PATH directory. The node's reading (guestkit.Node):
// init_net's links, addresses, routes of every table, the RDMA devices,
// their ports and GIDs, the SMC pnet table, the host-local leases and the
// plugin's records. Every check is a subtest named as the shell
// scenario's steps were.
package upgrade

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	upBin   = "/opt/cni-up" // the CNI_PATH directory the builds take turns in
	dataDir = "/run/rdma-chain-up"
	ripam   = "/run/ipam-up" // rdma0's leases
	oldBin  = "/usr/local/bin/rdma-chain-old"
	newBin  = "/usr/local/bin/rdma-chain"
)

func TestUpgradeShared(t *testing.T)    { upgrade(t, "shared", "fd00:97::") }
func TestUpgradeExclusive(t *testing.T) { upgrade(t, "exclusive", "fd00:98::") }

// matrix is one mode's lists and node.
type matrix struct {
	mode          guestkit.Mode
	c             *guestkit.Calls
	v10, v11, ptp *libcni.NetworkConfigList
	subnet        string // rdma0's addresses start with it
	annotated     map[string]any
}

func upgrade(t *testing.T, mode, subnet string) {
	testenv.VMGuest(t)
	m := newMatrix(t, guestkit.SetUpMode(t, mode, subnet+"1"), subnet)
	if !guestkit.Check(t, "two-builds", twoBuilds) {
		t.Fatal("no two builds: no case runs")
	}
	// A first cycle makes the records' and leases' directories; from then
	// on the node must come back exactly.
	w := m.pod("warmup")
	guestkit.Check(t, "use-new", func() error { return use(newBin) })
	m.c.List = m.v10
	guestkit.ExpectOK(t, "warmup-add", m.c.Add(t, w))
	guestkit.ExpectOK(t, "warmup-del", m.c.Gone(t, w))
	n := 0
	for _, dir := range [][2]string{{"old", "new"}, {"new", "old"}} {
		t.Run(dir[0]+"-to-"+dir[1], func(t *testing.T) {
			from, to := build(dir[0]), build(dir[1])
			n++
			m.checkedByTo(t, from, to, m.pod(fmt.Sprintf("up%d", n)))
			n++
			m.collectedByTo(t, from, to, m.pod(fmt.Sprintf("up%d", n)))
		})
	}
	if mode == "exclusive" {
		guestkit.Check(t, "mode-still-exclusive", func() error { return guestkit.ModeIs(rdma.ModeExclusive) })
	}
}

func newMatrix(t *testing.T, mode guestkit.Mode, subnet string) *matrix {
	// A kernel without SMC (docs/kernels.md): annotated pods attach without
	// SMC-R (onUnsupported warn; the smc scenario asserts that outcome).
	onUnsupported := "fail"
	if !guestkit.HasSMC() {
		onUnsupported = "warn"
	}
	entry := `"mode":"` + mode.Name + `","devices":` + mode.Devices + `,"podSelection":"all","dataDir":"` + dataDir +
		`","smcr":{"transparent":"off","onUnsupported":"` + onUnsupported + `"},` +
		`"capabilities":{"io.kubernetes.cri.pod-annotations":true},` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"` + subnet + `/64"}]],"dataDir":"` + ripam + `"}`
	m := &matrix{mode: mode, c: guestkit.NewCalls(t, "1.0.0", dataDir), subnet: subnet,
		annotated: map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"network.alibabacloud.com/erdma-smcr": "true"}}}
	m.c.C = guestkit.NewChain(upBin)
	var err error
	if m.v10, err = guestkit.Conflist("1.0.0", entry); err == nil {
		if m.v11, err = guestkit.Conflist("1.1.0", entry); err == nil {
			m.ptp, err = guestkit.Conflist("1.1.0", "")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conflist: rdma-chain {%s}", entry)
	return m
}

func (m *matrix) pod(name string) guestkit.Pod {
	p := guestkit.NewPod("up-", name)
	p.Caps = m.annotated
	return p
}

func build(name string) string {
	if name == "old" {
		return oldBin
	}
	return newBin
}

// twoBuilds checks that both builds are there and differ.
func twoBuilds() error {
	sums := make([][]byte, 2)
	for i, b := range []string{oldBin, newBin} {
		f, err := os.Open(b)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return err
		}
		sums[i] = h.Sum(nil)
	}
	if slices.Equal(sums[0], sums[1]) {
		return errors.New("the old and the new build are the same binary")
	}
	return nil
}

// use installs build src as upBin's rdma-chain, as the DaemonSet does.
func use(src string) error { return guestkit.InstallPlugin(upBin, src, guestkit.BinDir) }
