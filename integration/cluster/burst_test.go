//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// burstPlain and burstRDMA are the burst's pods: most ask for no RDMA (the
// plugin passes them through), some for rdma/hca (8 of node-b's 10,
// leaving room for a pod an earlier scenario may still hold).
const burstPlain, burstRDMA = 52, 8

// pluginLog is the plugin's log file on a node, as the shell pod sees it.
const pluginLog = "/host/var/log/rdma-chain.log"

// testBurst plays a node's boot, which starts tens of pods at once while
// kubelet's pod-resources API refuses lookups past 100 QPS (burst 10). It
// creates 60 pods (52 passed through, 8 with rdma/hca) at once on node-b
// and checks that all run, the node's network never turns NotReady (the
// plugin's STATUS) and no FailedCreatePodSandBox names the plugin; the
// plugin's ADD p50, p99 and max go into CLUSTER-SUMMARY. Then kubelet is
// killed while ten ADDs are in flight (its supervisor starts it again),
// and every pod runs, with rdma0 where it asked for RDMA. Deleted, each
// group leaves the node as it was.
func testBurst(t *testing.T, cp *controlPlane, sum *scenarioTimes) {
	node := twoRootNode
	cp.nodeQuiet(t, node)
	before := cp.nodeShell(t, node, nodeStateScript)

	adds := cp.burstGroup(t, node, "burst", burstPlain, burstRDMA, before, nil, withPlugin)
	fig := fmt.Sprintf("burst on %s: %d pods, plugin ADD %s", node, burstPlain+burstRDMA, adds)
	t.Logf("CLUSTER-FIGURE %s", fig)
	sum.figure(fig)

	// kubelet killed under ADDs: a script on the node waits for the
	// group's first finished ADD, so the others are in flight or queued,
	// and kills kubelet; its exec, which runs through kubelet, ends there,
	// so it writes what it saw to a file read afterwards.
	cp.shellPod(t, node) // found now: the goroutine below must not fail t
	kill := func() {
		_, _ = cp.nodeExec(t, node, `i=0
until grep -qE 'msg=(done|failed) .*verb=ADD .*pod=default/kubelet-kill-' `+pluginLog+`; do
	i=$((i + 1)); [ $i -lt 1500 ] || { echo "no ADD of the group in 300 s" >/host/run/rc-kubelet-kill.log; exit 1; }
	sleep 0.2
done
echo "kubelet $(pidof kubelet) killed after $(grep -cE 'msg=(done|failed) .*verb=ADD .*pod=default/kubelet-kill-' `+pluginLog+`) of the group's ADDs ended" >/host/run/rc-kubelet-kill.log
kill -9 $(pidof kubelet)`)
	}
	adds = cp.burstGroup(t, node, "kubelet-kill", 2, burstRDMA, before, kill, withPlugin)
	saw := cp.nodeShell(t, node, "cat /host/run/rc-kubelet-kill.log; rm -f /host/run/rc-kubelet-kill.log")
	t.Logf("kubelet killed under ADDs: %s; the group's plugin ADD %s", saw, adds)
	if !strings.Contains(saw, " killed after ") {
		t.Errorf("kubelet was not killed under the group's ADDs: %s", saw)
	}
}

// testBurstControl is burst's control, run after uninstall: the same 60
// pods created at once on node-b with the primary alone in its conflist
// (the device plugin still offers rdma/hca). It shows whether the node
// itself starts them: where it does not, burst's failure on this machine
// is the machine's, not the plugin's.
func testBurstControl(t *testing.T, cp *controlPlane) {
	node := twoRootNode
	cp.nodeQuiet(t, node)
	if out := cp.nodeShell(t, node, "cat /host/etc/cni/net.d/*.conflist"); strings.Contains(out, "rdma-chain") {
		t.Fatalf("%s's conflist still names rdma-chain:\n%s", node, out)
	}
	before := cp.nodeShell(t, node, nodeStateScript)
	cp.burstGroup(t, node, "burst-control", burstPlain, burstRDMA, before, nil, primaryAlone)
}

// Whether rdma-chain is in the node's conflist during a burst group.
const withPlugin, primaryAlone = true, false

// burstGroup creates plain+rdma pods named prefix-N at once on node
// (during, if given, runs beside the wait), waits until all are Ready
// while the node stays Ready, checks that no FailedCreatePodSandBox
// names the plugin, deletes them and waits for the node as before. With
// plugin (rdma-chain installed) it checks rdma0 in the RDMA pods and
// returns the plugin's ADD figures for the group.
func (cp *controlPlane) burstGroup(t *testing.T, node, prefix string, plain, rdma int, before string, during func(), plugin bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), prefix+".yaml")
	if err := os.WriteFile(path, []byte(burstManifest(prefix, node, plain, rdma)), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if during != nil {
		go during()
	}
	if out, err := cp.kubectlOut("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.kubectlOut("delete", "-f", path, "--wait=false") })
	allReady := false
	t.Cleanup(func() {
		if allReady {
			return
		}
		// Where the node's time went, before the pods go: one minute at
		// most, as the binary's deadline may be near.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := cp.kubectlCtx(ctx, "-n", "kube-system", "exec", cp.shellPod(t, node), "--", "/bin/busybox", "sh", "-c",
			`cat /proc/loadavg; echo "shims $(pidof containerd-shim-runc-v2 | wc -w)";
grep -E 'msg=(done|failed) .*verb=ADD .*pod=default/`+prefix+`-' `+pluginLog+` | tail -n 200`)
		t.Logf("%s after %s failed (%v): plugin ADD %s; load and shims: %s", node, prefix, err, addFigures(out), firstLines(out, 2))
	})
	var notReady []string
	cp.pollFunc(t, 15*time.Minute, func() (bool, string) {
		if s, err := cp.kubectlOut("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`); err == nil && !strings.HasPrefix(s, "True ") {
			notReady = append(notReady, fmt.Sprintf("%.0f s: %s", time.Since(start).Seconds(), s))
		}
		out, err := cp.kubectlOut("get", "pods", "-l", "app="+prefix, "-o",
			`jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		ready := strings.Count(out, "True")
		return err == nil && ready == plain+rdma, fmt.Sprintf("%s: %d of %d pods Ready (%v)", prefix, ready, plain+rdma, err)
	})
	allReady = true
	t.Logf("CLUSTER-TIME %s: %d pods Ready on %s %.1f s after kubectl apply", prefix, plain+rdma, node, time.Since(start).Seconds())
	// A kubelet killed on purpose may leave the node NotReady for a
	// while; the plugin's STATUS failing says NetworkPluginNotReady.
	if len(notReady) > 0 {
		t.Logf("%s not Ready during %s: %v", node, prefix, notReady)
		if slices.ContainsFunc(notReady, func(s string) bool { return strings.Contains(s, "NetworkPluginNotReady") }) || during == nil {
			t.Errorf("%s's network was not ready during %s", node, prefix)
		}
	}
	for i := range rdma {
		if plugin {
			cp.requireRDMA0(t, node, fmt.Sprintf("%s-rdma-%d", prefix, i))
		}
	}
	events, _ := cp.kubectlOut("get", "events", "--field-selector", "reason=FailedCreatePodSandBox",
		"-o", `jsonpath={range .items[*]}{.involvedObject.name} x{.count}: {.message}{"\n"}{end}`)
	for _, l := range strings.Split(events, "\n") {
		if !strings.HasPrefix(l, prefix+"-") {
			continue
		}
		t.Logf("%s", l)
		if strings.Contains(l, "rdma-chain") {
			t.Errorf("a sandbox of the burst failed in rdma-chain: %s", l)
		}
	}
	figures := "(no plugin)"
	if plugin {
		figures = addFigures(cp.nodeShell(t, node, `grep -E 'msg=(done|failed) .*verb=ADD .*pod=default/`+prefix+`-' `+pluginLog+`; true`))
	}

	start = time.Now()
	if out, err := cp.kubectlOut("delete", "-f", path, "--wait=true", "--timeout=10m"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	t.Logf("CLUSTER-TIME %s: kubectl delete --wait returned %.1f s after it began", prefix, time.Since(start).Seconds())
	cp.nodeAsBefore(t, node, before, start, prefix+"'s delete began")
	return figures
}

var addDuration = regexp.MustCompile(`\bduration=(\S+)`)

// addFigures reads the plugin's closing ADD lines: how many, how many
// failed, and the durations' p50, p99 and max.
func addFigures(log string) string {
	var ds []time.Duration
	failed := 0
	for _, l := range strings.Split(log, "\n") {
		m := addDuration.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if !strings.Contains(l, "outcome=ok") {
			failed++
		}
		if d, err := time.ParseDuration(m[1]); err == nil {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "no closing ADD lines"
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v p99 %v max %v (%d calls, %d failed)", r(at(0.5)), r(at(0.99)), r(ds[len(ds)-1]), len(ds), failed)
}

// burstManifest is a List of plain pods prefix-plain-N and rdma pods
// prefix-rdma-N (rdma/hca: 1), all labelled app=prefix and pinned to node.
func burstManifest(prefix, node string, plain, rdma int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
	pod := func(name, limits string) {
		fmt.Fprintf(&b, `  - apiVersion: v1
    kind: Pod
    metadata:
      name: %s
      namespace: default
      labels: {app: %s}
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {kubernetes.io/hostname: %s}
      containers:
        - name: app
          image: localhost/rdma-chain-test:node
          imagePullPolicy: Never
          command: [/bin/busybox, sleep, "3600"]
%s`, name, prefix, node, limits)
	}
	for i := range plain {
		pod(fmt.Sprintf("%s-plain-%d", prefix, i), "")
	}
	for i := range rdma {
		pod(fmt.Sprintf("%s-rdma-%d", prefix, i), "          resources: {limits: {rdma/hca: 1}}\n")
	}
	return b.String()
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "; ")
}
