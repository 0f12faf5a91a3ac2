//go:build cluster

package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// testWorkloads runs the manifests of dir (make test-cluster PODS=DIR;
// integration/cluster/workloads otherwise) as a user's: a group is the
// files whose names start with the same number, applied together with
// kubectl. Every pod of every workload must reach what its annotation
// test.rdma-chain/expect says (workloads_test.go), checked through the API
// and `kubectl exec` in the container that asks for RDMA (a sidecar may
// come first); each workload's pods span test.rdma-chain/nodes nodes. Then
// the group is deleted: its pods must go, and each node's links,
// addresses, RDMA links, GIDs and attachment records must equal what they
// were before the group.
func testWorkloads(t *testing.T, cp *controlPlane, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.yaml in %s: %v", dir, err)
	}
	groups := map[string][]string{}
	var keys []string
	for _, f := range files {
		k, _, _ := strings.Cut(filepath.Base(f), "-")
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], f)
	}
	for _, k := range keys {
		t.Run("group-"+k, func(t *testing.T) { runGroup(t, cp, groups[k]) })
	}
}

// runGroup is one group of manifests, from apply to the nodes as before.
func runGroup(t *testing.T, cp *controlPlane, files []string) {
	var ws []workload
	for _, f := range files {
		out, err := cp.kubectlOut("create", "--dry-run=client", "-o", "json", "-f", f)
		if err != nil {
			t.Fatalf("kubectl create --dry-run=client -f %s: %v: %s", f, err, out)
		}
		got, err := parseWorkloads([]byte(out), len(nodeNames))
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		ws = append(ws, got...)
	}
	if len(ws) == 0 {
		t.Fatalf("%v: no workload makes pods", files)
	}
	before := map[string]string{}
	for _, n := range nodeNames {
		before[n] = cp.nodeShell(t, n, nodeStateScript)
	}
	start := time.Now()
	for _, f := range files {
		if out, err := cp.kubectlOut("apply", "-f", f); err != nil {
			t.Fatalf("kubectl apply -f %s: %v: %s", f, err, out)
		}
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			for _, f := range files {
				_, _ = cp.kubectlOut("delete", "-f", f, "--wait=false")
			}
		}
	})
	pods := cp.workloadsSettled(t, ws, 15*time.Minute)
	t.Logf("CLUSTER-TIME group %v: every pod as expected %.1f s after kubectl apply", baseNames(files), time.Since(start).Seconds())
	for _, w := range ws {
		t.Run(w.kind+"-"+w.name, func(t *testing.T) { checkWorkload(t, cp, w, pods[w.String()]) })
	}
	start = time.Now()
	for _, f := range files {
		if out, err := cp.kubectlOut("delete", "-f", f, "--wait=true", "--timeout=5m"); err != nil {
			t.Fatalf("kubectl delete -f %s: %v: %s", f, err, out)
		}
	}
	deleted = true
	t.Logf("CLUSTER-TIME group %v: kubectl delete --wait returned %.1f s after the deletes began", baseNames(files), time.Since(start).Seconds())
	cp.podsGone(t, ws, files, start)
	for _, n := range nodeNames {
		cp.nodeAsBefore(t, n, before[n], start, "the group's deletes began")
	}
}

// podsGone waits until the group's pods, terminating ones too, are gone
// from the API, and prints when each left.
func (cp *controlPlane) podsGone(t *testing.T, ws []workload, files []string, start time.Time) {
	t.Helper()
	var left []string // each change of the pods still there, with when
	last := ""
	cp.pollFunc(t, 5*time.Minute, func() (bool, string) {
		there, err := cp.workloadPods(ws, true)
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, ps := range there {
			for _, p := range ps {
				names = append(names, p.Metadata.Namespace+"/"+p.Metadata.Name)
			}
		}
		slices.Sort(names)
		if now := strings.Join(names, " "); now != last {
			left = append(left, fmt.Sprintf("%.1f s: %d left %v", time.Since(start).Seconds(), len(names), names))
			last = now
		}
		return len(names) == 0, fmt.Sprintf("pods still there: %v", names)
	})
	t.Logf("CLUSTER-TIME group %v: its pods gone from the API %.1f s after the deletes began:\n%s",
		baseNames(files), time.Since(start).Seconds(), strings.Join(left, "\n"))
}

// nodeAsBefore waits until node's state equals before; a slow return
// prints what stayed behind, and when: seconds after start, which since
// names.
func (cp *controlPlane) nodeAsBefore(t *testing.T, node, before string, start time.Time, since string) {
	t.Helper()
	var now string
	var seen []string // each distinct difference, with when it was first read
	last := ""
	cp.pollFunc(t, 5*time.Minute, func() (bool, string) {
		now = cp.nodeShell(t, node, nodeStateScript)
		d := diffLines(before, now)
		if now != before && d != last {
			seen = append(seen, fmt.Sprintf("%.1f s: %s", time.Since(start).Seconds(), d))
			last = d
		}
		return now == before, d
	})
	took := time.Since(start)
	t.Logf("%s as before %.1f s after %s: %d lines of state", node, took.Seconds(), since, strings.Count(now, "\n"))
	if took > time.Minute && len(seen) > 0 {
		t.Logf("%s: what differed from before on the way back:\n%s", node, strings.Join(seen, "\n"))
	}
}

// nodeStateScript prints what a group's pods may change on a node and
// must give back: link names, addresses, RDMA links, each port's GIDs (as
// a set: the kernel may number rows in another order after a restore),
// rdma-chain's attachment records, and host-local's leases of both
// networks (the primary's, on tmpfs, and rdma-chain's IPv6 one).
const nodeStateScript = `ip -o link | awk -F': ' '{ sub(/@.*/, "", $2); print "link " $2 }' | sort
ip -o addr | awk '{ print "addr " $2 " " $4 }' | sort
/usr/sbin/rdma link | awk '{ print "rdma " $2 " " $4 " " $NF }' | sort
grep -H . /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' |
	sed -E 's|^/sys/class/infiniband/([^/]+)/ports/([0-9]+)/gids/[0-9]+:|gid \1/\2 |' | sort -u
ls /host/var/lib/cni/rdma-chain/attachments 2>/dev/null | sed 's/^/record /'
for f in /host/var/lib/cni/networks*/*/* /host/run/cni/networks*/*/*; do
	case ${f##*/} in lock | last_reserved_ip* | "*") ;; *) echo "lease ${f#/host/}" ;; esac
done
true
`

func baseNames(files []string) []string {
	var b []string
	for _, f := range files {
		b = append(b, filepath.Base(f))
	}
	return b
}

// diffLines lists the lines only in a, then only in b.
func diffLines(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	var d []string
	for _, l := range la {
		if !slices.Contains(lb, l) {
			d = append(d, "- "+l)
		}
	}
	for _, l := range lb {
		if !slices.Contains(la, l) {
			d = append(d, "+ "+l)
		}
	}
	return "node state differs from before:\n" + strings.Join(d, "\n")
}

// workloadPods lists the pods of each workload, those being deleted too
// when deleting is set.
func (cp *controlPlane) workloadPods(ws []workload, deleting bool) (map[string][]podItem, error) {
	out, err := cp.kubectlOut("get", "pods", "-A", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("kubectl get pods: %w: %s", err, out)
	}
	var list struct{ Items []podItem }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("kubectl get pods: %w", err)
	}
	byWorkload := map[string][]podItem{}
	for _, w := range ws {
		for _, p := range list.Items {
			if w.owns(&p) && (deleting || p.Metadata.DeletionTimestamp == nil) {
				byWorkload[w.String()] = append(byWorkload[w.String()], p)
			}
		}
	}
	return byWorkload, nil
}

// workloadsSettled waits until each workload has its pods and each pod is
// where its expectation says (Ready, or unschedulable for pending); it
// returns them by workload.
func (cp *controlPlane) workloadsSettled(t *testing.T, ws []workload, timeout time.Duration) map[string][]podItem {
	t.Helper()
	var byWorkload map[string][]podItem
	cp.pollFunc(t, timeout, func() (bool, string) {
		var err error
		if byWorkload, err = cp.workloadPods(ws, false); err != nil {
			return false, err.Error()
		}
		var waiting []string
		for _, w := range ws {
			got := byWorkload[w.String()]
			settled := 0
			for _, p := range got {
				if p.settled(w.expect) {
					settled++
				} else {
					waiting = append(waiting, fmt.Sprintf("%s (%s, want %s): %s", p.Metadata.Name, w, w.expect, p.state()))
				}
			}
			if len(got) != w.pods || settled != w.pods {
				waiting = append(waiting, fmt.Sprintf("%s: %d pods, %d as expected, want %d", w, len(got), settled, w.pods))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "\n")
	})
	return byWorkload
}

// pollFunc retries f, a second apart, until it reports done or timeout
// passes; then t fails with f's last reason and the control plane's tails.
// explain, when given, adds to the failure what only its end needs to say.
func (cp *controlPlane) pollFunc(t *testing.T, timeout time.Duration, f func() (bool, string), explain ...func() string) {
	t.Helper()
	wait, cut := testenv.Within(t, timeout)
	deadline := time.Now().Add(wait)
	for {
		ok, why := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, e := range explain {
				why += "\n" + e()
			}
			t.Fatalf("not within %v%s: %s\n%s", wait.Round(time.Second), cut, why, cp.tails())
		}
		time.Sleep(time.Second)
	}
}

// workloadsDir is the manifests' directory: PODS=DIR (the Makefile passes
// it as RC_CLUSTER_PODS), else the tier's own; user says which.
func workloadsDir(root string) (dir string, user bool) {
	if d := os.Getenv("RC_CLUSTER_PODS"); d != "" {
		return d, true
	}
	return filepath.Join(root, "integration/cluster/workloads"), false
}
