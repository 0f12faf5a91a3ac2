//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testDRAOnly attaches twoRootNode's NIC under secondRoot through DRA
// alone, in both netns modes. The node's device plugin is stopped first
// (kubelet then offers none of its resources there) and started again at
// the end. Its slice publishes its two NICs under different PCIe roots.
// Two pods whose claims ask for the NIC under secondRoot
// (pods/dra-root.yaml, no node named) are placed on that node by their
// claims alone:
//   - shared mode: both wait while eth2 is down (simrdma1 tainted), then
//     run, each with an ipvlan child of eth2 and only simrdma1's character
//     devices; eth2 taken down under them raises an Event on each;
//   - exclusive mode, switched as its admin would switch it (no pod netns
//     on the node, `rdma system set netns exclusive`): the slice no longer
//     holds simrdma0, whose eth1 holds the node's InternalIP (the entry's
//     nodeAddresses, from the DaemonSet's status.hostIPs); one runs with eth2
//     and simrdma1 moved into its netns; the other waits, Pending with the
//     scheduler's reason, and gets them once the first is deleted. Its
//     sandbox then dies without DEL under a stopped kubelet
//     (testOrphanedExclusive). After the last, eth2 and simrdma1 are back
//     on the node with the /64 the pods' addresses came from, and the
//     node goes back to shared mode.
func testDRAOnly(t *testing.T, cp *controlPlane) {
	node := twoRootNode
	devs := cp.sliceDevices(t, node)
	root0, root1 := devs["simrdma0"].str("resource.kubernetes.io/pcieRoot"), devs["simrdma1"].str("resource.kubernetes.io/pcieRoot")
	t.Logf("%s's slice: simrdma0 under %q, simrdma1 under %q", node, root0, root1)
	if root1 != secondRoot || root0 == "" || root0 == root1 {
		t.Fatalf("%s: want simrdma1 under %s and simrdma0 under another root, got %q and %q", node, secondRoot, root1, root0)
	}
	chars := charDevices(t, cp, node, "simrdma1")
	stopDevicePlugin(t, cp, node)
	path := filepath.Join(testenv.RepoRoot(), "integration/cluster/pods/dra-root.yaml")
	t.Run("shared", func(t *testing.T) {
		t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m") })
		// The only NIC the claims can have is down first: tainted, it
		// serves no claim until it is up again.
		up := nicDown(t, cp, node, "eth2", "simrdma1")
		start := time.Now()
		if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
			t.Fatalf("kubectl apply: %v: %s", err, out)
		}
		sched := cp.unschedulable(t, "dra-root-1")
		t.Logf("dra-root-1 while simrdma1 is tainted: %s", sched)
		if !strings.Contains(sched, "cannot allocate all claims") {
			t.Errorf("dra-root-1 unschedulable for another reason than its claim: %s", sched)
		}
		up()
		healthy := time.Now()
		for _, pod := range []string{"dra-root-1", "dra-root-2"} {
			cp.podBecomesReady(t, pod, 5*time.Minute)
		}
		t.Logf("CLUSTER-TIME dra-root-1 and -2 Ready %.1f s after kubectl apply, %.1f s after simrdma1's taint went, in shared mode",
			time.Since(start).Seconds(), time.Since(healthy).Seconds())
		for _, pod := range []string{"dra-root-1", "dra-root-2"} {
			assertHoldsNIC(t, cp, pod, "shared", chars)
		}
		// Down under the pods that hold it: each of them is told too.
		nicDown(t, cp, node, "eth2", "simrdma1", "dra-root-1", "dra-root-2")()
	})
	t.Run("exclusive", func(t *testing.T) { testExclusiveDRA(t, cp, path, chars) })
}

// testExclusiveDRA is testDRAOnly's exclusive half.
func testExclusiveDRA(t *testing.T, cp *controlPlane, path string, chars []string) {
	node := twoRootNode
	since := time.Now().UTC().Truncate(time.Second)
	setNetnsMode(t, cp, node, "exclusive")
	assertUplinkUnpublished(t, cp, node, since)
	shared := false
	t.Cleanup(func() {
		if !shared {
			_, _ = cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=3m")
			setNetnsMode(t, cp, node, "shared")
		}
	})
	start := time.Now()
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	first, second := oneReady(t, cp, "dra-root-1", "dra-root-2")
	t.Logf("CLUSTER-TIME %s Ready %.1f s after kubectl apply, in exclusive mode", first, time.Since(start).Seconds())
	assertHoldsNIC(t, cp, first, "exclusive", chars)
	sched := cp.unschedulable(t, second)
	events, _ := cp.kubectlOut("get", "events", "--field-selector", "involvedObject.name="+second+",reason=FailedScheduling", "-o", "jsonpath={.items[*].message}")
	t.Logf("%s: %s; its FailedScheduling events: %s", second, sched, events)
	if !strings.Contains(sched, "cannot allocate all claims") || !strings.Contains(events, "cannot allocate all claims") {
		t.Errorf("%s waits for another reason than its claim: %s; events: %s", second, sched, events)
	}
	start = time.Now()
	if out, err := cp.kubectlOut("delete", "pod", first, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("delete %s: %v: %s", first, err, out)
	}
	cp.podBecomesReady(t, second, 5*time.Minute)
	t.Logf("CLUSTER-TIME %s Ready %.1f s after %s's delete began", second, time.Since(start).Seconds(), first)
	assertHoldsNIC(t, cp, second, "exclusive", chars)
	testOrphanedExclusive(t, cp, second, chars)
	if out, err := cp.kubectlOut("delete", "-f", path, "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	t.Logf("%s: %s", node, strings.TrimSpace(cp.nodeShell(t, node, `i=0
until [ -e /sys/class/infiniband/simrdma1 ] && /usr/sbin/ip -6 -o addr show dev eth2 2>/dev/null | grep -q 'fd00:20:2::1/64'; do
	i=$((i + 1))
	[ $i -le 150 ] || { echo "eth2 or simrdma1 not back after 30 s:"; /usr/sbin/ip -o addr show dev eth2; ls /sys/class/infiniband; exit 1; }
	sleep 0.2
done
echo "eth2 and simrdma1 back: $(/usr/sbin/ip -6 -o addr show dev eth2 scope global | tr -s ' ' | cut -d' ' -f4)"`)))
	setNetnsMode(t, cp, node, "shared")
	shared = true
}

// assertUplinkUnpublished checks that in exclusive mode node's DRA driver
// leaves out simrdma0, whose netdev eth1 holds the node's InternalIP
// (kubelet's --node-ip, on a netdev no default route uses: only the
// entry's nodeAddresses shows it), and its log since then says so.
// Published, a claim allocated it would move the node's address into a
// pod.
func assertUplinkUnpublished(t *testing.T, cp *controlPlane, node string, since time.Time) {
	t.Helper()
	ip, err := cp.kubectlOut("get", "node", node, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
	if err != nil || ip == "" {
		t.Fatalf("%s's InternalIP: %v: %s", node, err, ip)
	}
	pod, err := cp.draPodOn(node)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := cp.logsSince(pod, since)
	if err != nil {
		t.Fatalf("logs of %s: %v: %s", pod, err, logs)
	}
	want := "device=simrdma0 why=\"exclusive mode: its netdev eth1 carries the node's address " + ip + " (nodeAddresses)"
	var seen []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "RDMA device not published") {
			seen = append(seen, l)
		}
	}
	if !strings.Contains(strings.Join(seen, "\n"), want) {
		t.Errorf("%s: no log line with %s; its lines about devices not published:\n%s", pod, want, strings.Join(seen, "\n"))
	}
	t.Logf("%s (InternalIP %s on eth1): %s", node, ip, lastLine(strings.Join(seen, "\n")))
}

// stopDevicePlugin stops node's device plugin until t ends, and waits
// for kubelet to offer none of its rdma/hca there; at t's end it starts
// it again as the node's init does and waits for the resource to return.
func stopDevicePlugin(t *testing.T, cp *controlPlane, node string) {
	t.Helper()
	cp.nodeShell(t, node, `kill $(pidof k8s-rdma-shared-dp) || exit 1
i=0
while pidof k8s-rdma-shared-dp >/dev/null; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done`)
	cp.stoppedPlugins.Store(node, true)
	t.Cleanup(func() {
		cp.stoppedPlugins.Delete(node)
		cp.nodeShell(t, node, `chroot /host /bin/sh -c 'setsid /usr/local/bin/k8s-rdma-shared-dp --config-file /etc/rdma-dp/config.json >>/run/rdma-dp.log 2>&1 </dev/null &'`)
		start := time.Now()
		cp.poll(t, 5*time.Minute, func(s string) bool { return s != "" && s != "0" },
			"get", "node", node, "-o", `jsonpath={.status.allocatable.rdma/hca}`)
		t.Logf("CLUSTER-TIME %s's device plugin offers rdma/hca again %.1f s after its start", node, time.Since(start).Seconds())
	})
	out := cp.poll(t, 3*time.Minute, func(s string) bool { return s == "0" },
		"get", "node", node, "-o", `jsonpath={.status.allocatable.rdma/hca}`)
	t.Logf("%s: device plugin stopped; allocatable rdma/hca %s", node, out)
}

// assertHoldsNIC checks that pod runs on twoRootNode with simrdma1
// allocated to its claim and an rdma0 of eth2 (its MAC: eth2 itself in
// exclusive mode, an ipvlan child in shared mode) with an address of
// eth2's /64, holds exactly chars in /dev/infiniband, and its claim's
// status carries rdma0. In exclusive mode the pod sees simrdma1 only and
// the node has neither eth2 nor simrdma1; in shared mode both stay on the
// node.
func assertHoldsNIC(t *testing.T, cp *controlPlane, pod, mode string, chars []string) {
	t.Helper()
	cp.requireRDMA0(t, twoRootNode, pod)
	if node, _ := cp.kubectlOut("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"); node != twoRootNode {
		t.Errorf("%s runs on %q, want %s (the only node with %s)", pod, node, twoRootNode, secondRoot)
	}
	claim, err := cp.kubectlOut("get", "pod", pod, "-o", `jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}`)
	if err != nil || claim == "" {
		t.Fatalf("%s has no claim: %v: %s", pod, err, claim)
	}
	alloc, _ := cp.kubectlOut("get", "resourceclaim", claim, "-o",
		`jsonpath={range .status.allocation.devices.results[*]}{.driver} {.pool} {.device}{end}`)
	if want := "rdma-chain.github.io " + twoRootNode + " simrdma1"; alloc != want {
		t.Errorf("claim %s allocated %q, want %q", claim, alloc, want)
	}
	ibOut, err := cp.exec(pod, "/bin/busybox", "ls", "/sys/class/infiniband")
	ib := strings.Join(strings.Fields(ibOut), " ")
	if err != nil || (mode == "exclusive" && ib != "simrdma1") || !strings.Contains(ib, "simrdma1") {
		t.Errorf("%s sees RDMA devices %q (%v) in %s mode", pod, ib, err, mode)
	}
	mac, _ := cp.exec(pod, "/bin/busybox", "cat", "/sys/class/net/rdma0/address")
	if mac = strings.TrimSpace(mac); mac != twoRootMAC {
		t.Errorf("%s's rdma0 has MAC %q, want eth2's", pod, mac)
	}
	addr := podRDMAAddr(t, cp, pod)
	if !strings.HasPrefix(addr, "fd00:20:2:") {
		t.Errorf("%s's rdma0 address %s is not of eth2's /64", pod, addr)
	}
	assertCharDevices(t, cp, pod, chars)
	status := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "rdma0") && strings.Contains(s, "True") },
		"get", "resourceclaim", claim, "-o", claimStatus)
	if !strings.Contains(status, addr) || !strings.Contains(status, mac) {
		t.Errorf("claim %s status %q lacks %s's rdma0 address %s or MAC %s", claim, status, pod, addr, mac)
	}
	host := strings.Join(strings.Fields(cp.nodeShell(t, twoRootNode, `ls -d /sys/class/net/eth2 /sys/class/infiniband/simrdma1 2>/dev/null; true`)), " ")
	want := "/sys/class/infiniband/simrdma1 /sys/class/net/eth2" // ls -d sorts
	if mode == "exclusive" {
		want = ""
	}
	if host != want {
		t.Errorf("%s holds the NIC in %s mode; the node has %q, want %q", pod, mode, host, want)
	}
	t.Logf("%s (%s mode): claim %s allocated %s; sees %s; rdma0 %s %s; claim status: %s", pod, mode, claim, alloc, ib, addr, mac, status)
}

// setNetnsMode switches node's RDMA netns mode as its admin would: once no
// pod with a netns of its own is on the node (the kernel refuses the
// switch, EBUSY, while any netns but the host's exists, and a deleted
// pod's netns dies a little after it), with `rdma system set netns`. Then
// it waits for the DRA driver's slice to say so (its next reading: the
// driver reads the node every 30 s): simrdma1 in that mode, and simrdma0,
// the node address's NIC, published in shared mode only.
func setNetnsMode(t *testing.T, cp *controlPlane, node, mode string) {
	t.Helper()
	start := time.Now()
	cp.poll(t, 5*time.Minute, func(s string) bool { return !strings.Contains(s, "=;") && !strings.Contains(s, "=false;") },
		"get", "pods", "-A", "--field-selector", "spec.nodeName="+node, "-o",
		`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.spec.hostNetwork};{end}`)
	out := cp.nodeShell(t, node, fmt.Sprintf(`i=0
until out=$(/usr/sbin/rdma system set netns %s 2>&1); do
	i=$((i + 1))
	[ $i -le 300 ] || { echo "$out"; echo "netns of the node's processes:"; for p in /proc/[0-9]*; do readlink $p/ns/net; done | sort | uniq -c; exit 1; }
	sleep 0.2
done
echo "$i refusals, then: $(/usr/sbin/rdma system show)"`, mode))
	t.Logf("%s: %s", node, strings.TrimSpace(out))
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		devs := cp.sliceDevices(t, node)
		got := devs["simrdma1"].str("netnsMode")
		_, uplink := devs["simrdma0"]
		ok := got == mode && uplink == (mode == "shared")
		if !ok {
			time.Sleep(time.Second)
		}
		return ok, fmt.Sprintf("%s's slice says netnsMode %q for simrdma1, want %q; simrdma0 published: %v", node, got, mode, uplink)
	})
	t.Logf("CLUSTER-TIME %s in %s mode, and its slice saying so, %.1f s after its pods were waited for", node, mode, time.Since(start).Seconds())
}

// sliceDevice is what the tier reads of a device in a ResourceSlice.
type sliceDevice struct {
	Name       string `json:"name"`
	Attributes map[string]struct {
		String *string `json:"string"`
	} `json:"attributes"`
}

// str is the string attribute key ("" when absent): unqualified names are
// the driver's own, as the API stores them.
func (d sliceDevice) str(key string) string {
	if a, ok := d.Attributes[key]; ok && a.String != nil {
		return *a.String
	}
	return ""
}

// sliceDevices maps the RDMA device names (the driver's rdmaDevice
// attribute) of node's ResourceSlices to their devices.
func (cp *controlPlane) sliceDevices(t *testing.T, node string) map[string]sliceDevice {
	t.Helper()
	out, err := cp.kubectlOut("get", "resourceslices", "--field-selector", "spec.nodeName="+node, "-o", "json")
	if err != nil {
		t.Fatalf("get resourceslices: %v: %s", err, out)
	}
	var list struct {
		Items []struct {
			Spec struct {
				Devices []sliceDevice `json:"devices"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("resourceslices: %v", err)
	}
	devs := map[string]sliceDevice{}
	for _, it := range list.Items {
		for _, d := range it.Spec.Devices {
			devs[d.str("rdmaDevice")] = d
		}
	}
	return devs
}

// unschedulable waits until the scheduler says pod cannot be placed, and
// returns its PodScheduled condition: "False Unschedulable: MESSAGE".
func (cp *controlPlane) unschedulable(t *testing.T, pod string) string {
	t.Helper()
	return cp.poll(t, 2*time.Minute, func(s string) bool { return strings.HasPrefix(s, "False Unschedulable") },
		"get", "pod", pod, "-o", `jsonpath={.status.conditions[?(@.type=="PodScheduled")].status} {.status.conditions[?(@.type=="PodScheduled")].reason}: {.status.conditions[?(@.type=="PodScheduled")].message}`)
}

// podBecomesReady waits until pod is Ready. If it does not become Ready,
// the failure holds what kubectl describe says of it: where it was placed,
// its conditions and events.
func (cp *controlPlane) podBecomesReady(t *testing.T, pod string, timeout time.Duration) {
	t.Helper()
	cp.pollFunc(t, timeout, func() (bool, string) {
		out, err := cp.kubectlOut("get", "pod", pod, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True", fmt.Sprintf("pod %s Ready %q (%v)", pod, out, err)
	}, func() string {
		desc, err := cp.kubectlOut("describe", "pod", pod)
		return fmt.Sprintf("kubectl describe pod (%v):\n%s", err, desc)
	})
}

// oneReady waits until one of two pods competing for one thing is Ready
// (which one is the scheduler's choice) and returns it first.
func oneReady(t *testing.T, cp *controlPlane, a, b string) (first, second string) {
	t.Helper()
	cp.poll(t, 5*time.Minute, func(s string) bool {
		switch {
		case strings.Contains(s, a+"=True;"):
			first, second = a, b
		case strings.Contains(s, b+"=True;"):
			first, second = b, a
		}
		return first != ""
	}, "get", "pod", a, b, "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status};{end}`)
	return first, second
}
