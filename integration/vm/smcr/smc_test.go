// Package smcr is the VM tier's SMC-R scenario (smc, in the shared-mode
// boot), run in its guests: the pnet table the plugin gives pods annotated
// network.alibabacloud.com/erdma-smcr, on soft-RoCE rxe0 (netdev veth0),
// chained after a dual-stack ptp + host-local primary at cniVersion 1.0.0
// whose conflist declares the pod-annotations capability. An annotated
// pod gets {PNETID, rxe0, port 1} in init_net and {PNETID, eth0} in its
// netns, PNETID being veth0's MAC upper-cased without colons; unannotated
// and "maybe" pods get none; smcr.ueid lands in the global UEID table; the
// plugin's own CHECK passes. An AF_SMC connection between two annotated
// pods over IPv4 must not fall back for "no SMC device" (0x03030000) once
// veth0 has an address in the pods' subnet; one over IPv6 falls back to
// TCP with 0x03030000 (docs/kernels.md, "SMC-R and IPv6": the RC-SMCR
// lines this test logs). DEL removes the pod entry, and the init_net entry
// with the last annotated pod; a second DEL and the records left are
// checked too. On a kernel without SMC (Debian's 7.3): what
// smcr.onUnsupported says, warn and fail (nosmc_test.go).
//
// Every check is a subtest; the kernel is read through pkg/smc (pnet
// tables, UEIDs, fallback statistics), netlink and pkg/rdma (GIDs), never
// by parsing a tool's text, and the AF_SMC exchange runs in this process
// (connect_test.go).
package smcr

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

const (
	rxe        = "rxe0"  // the soft-RoCE device the conflist offers
	rxeNetdev  = "veth0" // its netdev
	ueid       = "RDMACHAIN-TEST"
	dataDir    = "/run/rdma-chain-smc"
	annCap     = "io.kubernetes.cri.pod-annotations"
	annotation = "network.alibabacloud.com/erdma-smcr"
	// primary is ptp with host-local, dual-stack: the IPv6 connection runs
	// over its second range.
	primary = `{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}],[{"subnet":"fd00:99::/64"}]],"dataDir":"/run/ipam"}}`
)

// sharedFields are rdma-chain's conflist fields without smcr and
// capabilities, its state in dir.
func sharedFields(dir string) string {
	return `"mode":"shared","devices":["` + rxe + `"],"podSelection":"all","dataDir":"` + dir + `","sharedLink":{"type":"none"}`
}

// scenario is the SMC-capable kernel's part: the calls, the PNETID the
// plugin derives and the rows it must write.
type scenario struct {
	*guestkit.Calls
	pnetID string
	host   smc.PnetEntry // init_net's row of an annotated pod's device
	pod    smc.PnetEntry // an annotated pod's row in its netns
	pods   []guestkit.Pod
}

func TestSMC(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	e := guestkit.NewCalls(t, "1.0.0", dataDir)
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("no soft-RoCE rxe0: no case runs")
	}
	if !guestkit.HasSMC() {
		noSMCOutcomes(t, e)
		t.Logf("smc: %.0f s", time.Since(start).Seconds())
		return
	}
	// /sys/module/smc alone is what HasSMC read: the module must also
	// answer on its generic netlink family.
	guestkit.Check(t, "smc-module", smcFamily)
	s := newScenario(t, e)
	s.entries(t)
	s.check(t)
	s.connections(t)
	s.dels(t)
	t.Logf("smc: %.0f s", time.Since(start).Seconds())
}

// smcFamily checks that SMC answers on its generic netlink family (a
// pnet dump).
func smcFamily() error {
	return smc.Do("", func(c *smc.Client) error { _, err := c.PnetDump(); return err })
}

// newScenario derives the PNETID from veth0's MAC (independently of the
// plugin's pkg/smc) and makes the dual-stack conflist with smcr.ueid and
// the pod-annotations capability the one the calls use.
func newScenario(t *testing.T, e *guestkit.Calls) *scenario {
	l, err := netlink.LinkByName(rxeNetdev)
	if err != nil {
		t.Fatalf("%s, rxe0's netdev: %v", rxeNetdev, err)
	}
	mac := l.Attrs().HardwareAddr
	s := &scenario{Calls: e, pnetID: strings.ToUpper(strings.ReplaceAll(mac.String(), ":", ""))}
	s.host = smc.PnetEntry{PnetID: s.pnetID, IBName: rxe, IBPort: 1}
	s.pod = smc.PnetEntry{PnetID: s.pnetID, EthName: "eth0"}
	t.Logf("%s MAC %s -> expected PNETID %s; %s node_guid %s", rxeNetdev, mac, s.pnetID, rxe, nodeGUID())
	entry := `{"type":"` + guestkit.PluginName + `",` + sharedFields(dataDir) + `,"smcr":{"ueid":"` + ueid + `"},"capabilities":{"` + annCap + `":true}}`
	conf := `{"cniVersion":"` + e.V + `","name":"rdmanet","plugins":[` + primary + `,` + entry + `]}`
	if e.List, err = libcni.ConfListFromBytes([]byte(conf)); err != nil {
		t.Fatalf("conflist %s: %v", conf, err)
	}
	t.Logf("conflist: %s", conf)
	s.pods = []guestkit.Pod{annotated("pod1", "true"), annotated("pod2", ""), annotated("pod3", "maybe"), annotated("pod4", "true")}
	return s
}

// annotated is a pod whose runtime passes the SMC-R annotation with value
// (none when value is ""), as containerd passes pod annotations to a
// plugin that declares the capability.
func annotated(name, value string) guestkit.Pod { return annotatedIn("smc-", name, value) }

// annotatedIn is annotated with idPrefix making its container ID.
func annotatedIn(idPrefix, name, value string) guestkit.Pod {
	p := guestkit.NewPod(idPrefix, name)
	if value != "" {
		p.Caps = map[string]any{annCap: map[string]string{annotation: value}}
	}
	return p
}

func nodeGUID() string {
	devs, err := rdma.New().Devices()
	for _, d := range devs {
		if d.Name == rxe {
			return d.NodeGUID
		}
	}
	return fmt.Sprintf("unknown (%v)", err)
}

// check logs the whole chain's CHECK and checks that rdma-chain's own
// passes.
func (s *scenario) check(t *testing.T) {
	p := s.pods[0]
	err := s.Check(t, p)
	t.Logf("full-chain CHECK of %s (ptp + rdma-chain): %v", p.Name, err)
	guestkit.ExpectOK(t, "check-"+p.Name, s.CheckOwn(t, p))
}
