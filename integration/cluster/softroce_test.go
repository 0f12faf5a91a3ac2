//go:build cluster

package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// softRoCENIC is podSoftRoCE's NIC on every node: a second L2 segment
// between the VMs, without an RDMA device, that the guest's init names by
// its MAC (softRoCEMACFormat with the node's index) and gives the /64
// fd00:60:IDX::/64.
const (
	softRoCENIC       = "soft0"
	softRoCEMACFormat = "52:54:00:00:09:%02x"
	// softRoCEKernel is the kernel both ends boot: rdma_rxe has a UDP
	// socket per netns from Linux 7.1 on.
	softRoCEKernel = "7.3"
)

// softRoCEPods are the soft-roce scenario's DRA pods, one per node
// (pods/softroce-dra.yaml), beside the Lingjun Job's two.
var softRoCEPods = []string{"softroce-dra-a", "softroce-dra-b"}

// testSoftRoCE (soft-roce, after uninstall): pod-to-pod RoCE across nodes
// with a soft-RoCE device per pod (podSoftRoCE), which needs Linux 7.1 on
// both ends: node-a, on 6.12 for the SMC-R scenarios until here, boots
// 7.3 with its disk kept (a kernel upgrade). On soft0 of both nodes:
// host-to-host perftest between an rxe device made on each host for the
// measurement (and deleted before any pod), then rdma-chain installed
// again with the entry `podSoftRoCE: soft0` (docs/configuration.md),
// the Lingjun Job's two workers (device plugin) and a DRA pod per node
// (a claim of the soft-RoCE device): the workers' rping and perftest
// between their own devices beside the host's figures, all four pods'
// ib_write_bw pairwise, and, once deleted, nothing of theirs left on
// either node.
func testSoftRoCE(t *testing.T, owner testing.TB, cp *controlPlane, vm *nodeVM) {
	if vm.name != diskNode || nodeKernels[twoRootNode] != softRoCEKernel {
		t.Fatalf("soft-roce boots the disk node %s (got %s) on %s, which %s must run too (it runs %s)",
			diskNode, vm.name, softRoCEKernel, twoRootNode, nodeKernels[twoRootNode])
	}
	kver := vm.env["KVER_"+strings.ReplaceAll(softRoCEKernel, ".", "_")]
	if why := rdma.SoftRoCEUnsupported(kver); why != "" {
		t.Fatalf("kernel %s (%s): %s", softRoCEKernel, kver, why)
	}
	start := time.Now()
	vm.bootKernel(t, owner, cp, softRoCEKernel)
	cp.pollFunc(t, 10*time.Minute, func() (bool, string) {
		out, err := cp.nodeExec(t, vm.name, "uname -r")
		return err == nil && strings.TrimSpace(out) == kver, fmt.Sprintf("the shell pod on %s: %v: %s (want %s)", vm.name, err, out, kver)
	})
	cp.poll(t, 10*time.Minute, func(s string) bool { return s == "True" },
		"get", "node", vm.name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("CLUSTER-TIME %s: Ready in the API on %s %.1f s after its shutdown", vm.name, vm.kernel, time.Since(start).Seconds())
	for i, node := range nodeNames {
		cp.nodeShell(t, node, softRoCERouter(i+1))
	}
	host := hostSoftRoCEPerf(t, cp)

	install := filepath.Join(cp.dir, "my-rdma-chain-softroce")
	if err := writeInstall(install, "integration/cluster/deploy-softroce", cp.repo, cp.digest); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.kubectlOut("apply", "-k", install); err != nil {
		t.Fatalf("kubectl apply -k: %v: %s", err, out)
	}
	cp.rolledOut(t)
	start = time.Now()
	p := runPair(t, t, cp, "lingjun-job.yaml", "app=lingjun-rping")
	t.Logf("CLUSTER-TIME lingjun-rping on soft-RoCE: both pods Ready %.1f s after kubectl apply", time.Since(start).Seconds())
	ends := make([]softRoCEEnd, len(p.pods))
	for i := range p.pods {
		ends[i] = cp.readSoftRoCEEnd(t, p.pods[i], p.nodes[i])
	}
	cp.podsRPing(t, ends[1], ends[0])
	podsPerf(t, cp, ends[0], ends[1], host)

	dra := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/softroce-dra.yaml")
	if out, err := cp.kubectlOut("apply", "-f", dra); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", dra, "--wait=false") })
	for i, pod := range softRoCEPods {
		cp.podBecomesReady(t, pod, 10*time.Minute)
		cp.assertSoftRoCEClaim(t, pod, nodeNames[i])
		ends = append(ends, cp.readSoftRoCEEnd(t, pod, nodeNames[i]))
	}
	allPairs(t, cp, ends)

	start = time.Now()
	for _, del := range [][]string{{"delete", "-f", dra}, {"delete", "job", "lingjun-rping"}} {
		if out, err := cp.kubectlOut(append(del, "--wait=true", "--timeout=5m")...); err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(del, " "), err, out)
		}
	}
	cp.poll(t, 5*time.Minute, func(s string) bool { return s == "" }, "get", "pods", "-l", "app in (lingjun-rping,softroce-dra)", "-o", "name")
	for _, node := range nodeNames {
		cp.softRoCELeftNothing(t, node, start)
	}
}

// softRoCERouter makes node idx the router of its pods' block on soft0,
// as a fabric's router is for a Lingjun NIC's /64: a pod's route off its
// block goes through its IPAM range's first address (host-local's
// gateway), which sr0 holds, the node's own macvlan child of soft0 in
// bridge mode (a node's stack cannot reach its macvlan children through
// their parent, its own child can); the node forwards to the other nodes'
// /64s on soft0, whose pods answer for their addresses themselves.
func softRoCERouter(idx int) string {
	s := fmt.Sprintf(`set -e
/usr/sbin/ip link add sr0 link %[1]s type macvlan mode bridge
/usr/sbin/ip link set sr0 up
/usr/sbin/ip addr add fd00:60:%[2]d::f:0:c01/128 dev sr0 nodad
/usr/sbin/ip -6 route add fd00:60:%[2]d::f:0:c00/124 dev sr0
echo 1 >/proc/sys/net/ipv6/conf/all/forwarding
`, softRoCENIC, idx)
	for i := range nodeNames {
		if i+1 != idx {
			s += fmt.Sprintf("/usr/sbin/ip -6 route add fd00:60:%d::/64 dev %s\n", i+1, softRoCENIC)
		}
	}
	return s
}

// softRoCEEnd is one pod of the scenario: its rdma0 address and the RDMA
// device holding that address's RoCE v2 GID, which must be its own.
type softRoCEEnd struct {
	pod, node, addr, device, podIP string
}

// readSoftRoCEEnd reads a pod's end: rdma0's address, which must be of its
// node's soft0 /64 block (podIPv6Block), and the one RDMA device holding
// it as a RoCE v2 GID, which must be the pod's own rxe device.
func (cp *controlPlane) readSoftRoCEEnd(t *testing.T, pod, node string) softRoCEEnd {
	t.Helper()
	e := softRoCEEnd{pod: pod, node: node, addr: podRDMAAddr(t, cp, pod)}
	idx := indexOf(node)
	if want := fmt.Sprintf("fd00:60:%d::f:0:c", idx); !strings.HasPrefix(e.addr, want) {
		t.Errorf("%s on %s: rdma0 has %s, want an address of podIPv6Block in %s's /64 (%s...)", pod, node, e.addr, softRoCENIC, want)
	}
	out, err := cp.exec(pod, "/bin/busybox", "sh", "-c", strings.ReplaceAll(gidDevicesScript, "GID", expandIPv6(e.addr)))
	if err != nil {
		t.Fatalf("%s: the devices holding %s: %v: %s", pod, e.addr, err, out)
	}
	devs := strings.Fields(out)
	if len(devs) != 1 || !strings.HasPrefix(devs[0], "rxe_") {
		t.Fatalf("%s on %s: RDMA devices with a RoCE v2 GID of %s: %q, want one, the pod's own rxe_ device", pod, node, e.addr, devs)
	}
	e.device = devs[0]
	if e.podIP, err = cp.kubectlOut("get", "pod", pod, "-o", "jsonpath={.status.podIP}"); err != nil || e.podIP == "" {
		t.Fatalf("%s's pod IP: %v: %q", pod, err, e.podIP)
	}
	t.Logf("%s on %s: rdma0 %s, a RoCE v2 GID of its own %s only", pod, node, e.addr, e.device)
	return e
}

// gidDevicesScript prints the RDMA devices that hold GID (sysfs's form)
// as RoCE v2 on port 1. Unused GID entries answer EINVAL: grep's
// complaints about them say nothing.
const gidDevicesScript = `for f in $(grep -l "^GID$" /sys/class/infiniband/*/ports/1/gids/* 2>/dev/null); do
	p=${f%/gids/*}
	[ "$(cat "$p/gid_attrs/types/${f##*/}")" = "RoCE v2" ] || continue
	d=${p#/sys/class/infiniband/}
	echo "${d%%/*}"
done`

func indexOf(node string) int {
	for i, n := range nodeNames {
		if n == node {
			return i + 1
		}
	}
	return 0
}

// podsRPing runs rping from cli to srv's rdma0 address: it must pass, and
// the counters of both pods' own devices move while every other RDMA
// device of their nodes stays still.
func (cp *controlPlane) podsRPing(t *testing.T, cli, srv softRoCEEnd) {
	t.Helper()
	before := cp.rdmaCounters(t, cli, srv)
	ok, out, took := cp.rping(srv.pod, cli.pod, srv.addr, 2)
	if !ok {
		t.Fatalf("rping %s (%s) -> %s (%s) [%s] over their own soft-RoCE devices: %s", cli.pod, cli.node, srv.pod, srv.node, srv.addr, out)
	}
	cp.assertOwnDevicesCarried(t, before, cp.rdmaCounters(t, cli, srv), cli, srv)
	t.Logf("CLUSTER-FIGURE rping pod-to-pod on soft-RoCE %s -> %s [%s]: 10 pings in %.2f s", cli.node, srv.node, srv.addr, took.Seconds())
}
