//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// fleetGate holds the scheduler phase's pods back until their claims
// exist: the claims are made by kube-controller-manager's resourceclaim
// controller at its client's rate (20 requests/s, two per pod), which
// would otherwise set the scheduler's pace.
const fleetGate = "rdma-chain.github.io/fleet"

// runFleet runs one size, filling row as it goes: a control plane of its
// own, row.nodes simulated nodes and their drivers, and the scheduler
// phases.
func runFleet(t *testing.T, parts map[string]string, cfg fleetConfig, row *fleetRow) {
	n := row.nodes
	cp := startControlPlane(t, parts)
	t.Logf("control plane ready %.1f s after etcd's start", cp.started.Seconds())
	base := adminConfig(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	var drivers []*fleetDriver
	var driversMu sync.Mutex
	var leasesDone *sync.WaitGroup
	// Before the control plane stops (cleanups run last first).
	t.Cleanup(func() {
		cancel()
		driversMu.Lock()
		defer driversMu.Unlock()
		for _, d := range drivers {
			d.stop()
		}
		if leasesDone != nil {
			leasesDone.Wait()
		}
	})

	// The harness's own client (set-up and observation, not counted) and
	// the simulated kubelets', both above client-go's default rate.
	setup := fleetClient(t, base, nil, "fleet-harness", 500)
	kubelets := &reqCounter{}
	kubeletClient := fleetClient(t, base, kubelets, "fleet-kubelet", 500)
	start := time.Now()
	leases := createFleetNodes(ctx, t, setup, n)
	var leaseFailed atomic.Int64
	leasesDone = renewLeases(ctx, kubeletClient, leases, &leaseFailed)
	t.Logf("%d Nodes and their Leases created in %.1f s", n, time.Since(start).Seconds())
	slices := watchSlices(ctx, setup, n)

	// The drivers: each its own client, inventory and controllers.
	heap0, goroutines0 := liveHeap()
	counter := &reqCounter{}
	var ctrlErrs atomic.Int64
	start = time.Now()
	startErrs := make(chan error, n)
	for i := range n {
		go func() {
			name := fleetNodeName(i)
			client, err := newFleetClient(base, counter, "rdma-chain-dra/"+name, 0)
			if err != nil {
				startErrs <- err
				return
			}
			d, err := startFleetDriver(ctx, client, name, fleetInventory(), &ctrlErrs)
			if err == nil {
				driversMu.Lock()
				drivers = append(drivers, d)
				driversMu.Unlock()
			}
			startErrs <- err
		}()
	}
	for range n {
		if err := <-startErrs; err != nil {
			t.Fatalf("start a driver: %v", err)
		}
	}
	var last time.Time
	testenv.Eventually(t, 15*time.Minute, func() (bool, string) {
		got, at, wrong := slices.state(fleetNICs)
		last = at
		if len(wrong) > 0 {
			t.Fatalf("slices with other than %d devices: %s", fleetNICs, strings.Join(wrong[:min(len(wrong), 5)], ", "))
		}
		time.Sleep(200 * time.Millisecond)
		return got == n, fmt.Sprintf("%d of %d nodes' slices in the API after %.0f s; the controllers' errors: %d",
			got, n, time.Since(start).Seconds(), ctrlErrs.Load())
	})
	row.published = last.Sub(start)
	t.Logf("every node's slice in the API %.1f s after the drivers' start; requests so far: %s",
		row.published.Seconds(), perNode(counter.snapshot(), n))

	// Steady state: memory, then the idle window, while the scheduler
	// phase's pods are created (the drivers read no pods and no claims
	// after their start).
	time.Sleep(cfg.settle)
	heap1, goroutines1 := liveHeap()
	row.heapPerNode = float64(int64(heap1)-int64(heap0)) / float64(n)
	row.goroutinesPerNode = float64(goroutines1-goroutines0) / float64(n)
	t.Logf("heap %d -> %d bytes, goroutines %d -> %d over the drivers' start", heap0, heap1, goroutines0, goroutines1)

	claims := newClaimWatch(ctx, setup)
	row.claims = min(cfg.claims, n*110, n*fleetNICs*fleetGIDs/2)
	if row.claims < cfg.claims {
		t.Logf("%d claims per class, not %d: what %d nodes hold (110 pods, %d NICs of %d claims each)", row.claims, cfg.claims, n, fleetNICs, fleetGIDs/2)
	}
	classes := fleetClasses(t)
	podsDone := make(chan error, 1)
	go func() { podsDone <- createGatedPods(ctx, setup, classes, row.claims) }()

	idle0, kubelet0 := counter.snapshot(), kubelets.snapshot()
	counter.record(true)
	idleStart := time.Now()
	time.Sleep(cfg.idle)
	idle1, kubelet1 := counter.snapshot(), kubelets.snapshot()
	idleSeen := counter.record(false)
	minutes := time.Since(idleStart).Minutes()
	rate := func(a, b [reqKinds]int64, k int) float64 { return float64(b[k]-a[k]) / float64(n) / minutes }
	row.idleWatch, row.idleRead, row.idleWrite = rate(idle0, idle1, reqWatch), rate(idle0, idle1, reqRead), rate(idle0, idle1, reqWrite)
	row.kubeletWrite = rate(kubelet0, kubelet1, reqWrite)
	t.Logf("idle %.1f min: driver requests watch %d, read %d, write %d; simulated kubelets' writes %d (failed renewals so far %d)",
		minutes, idle1[reqWatch]-idle0[reqWatch], idle1[reqRead]-idle0[reqRead], idle1[reqWrite]-idle0[reqWrite],
		kubelet1[reqWrite]-kubelet0[reqWrite], leaseFailed.Load())
	if idle1[reqWrite] != idle0[reqWrite] || idle1[reqRead] != idle0[reqRead] {
		t.Errorf("the drivers wrote or read while idle (the goal is neither: watches only), first ones: %s", strings.Join(idleSeen, "; "))
	}
	if e := ctrlErrs.Load(); e > 0 {
		t.Errorf("the ResourceSlice controllers reported %d errors", e)
	}

	// The scheduler phases.
	if err := <-podsDone; err != nil {
		t.Fatalf("create the scheduler phase's pods: %v", err)
	}
	for _, c := range classes {
		testenv.Eventually(t, 20*time.Minute, func() (bool, string) {
			got := claims.created(c.namespace)
			time.Sleep(time.Second)
			return got == row.claims, fmt.Sprintf("%d of %d claims of %s made from their template by the resourceclaim controller", got, row.claims, c.namespace)
		})
	}
	waitUntainted(t, ctx, setup, n)
	sched := cp.procByName(t, "kube-scheduler")
	for _, c := range classes {
		row.classes = append(row.classes, schedulePhase(t, ctx, setup, claims, sched, c, row.claims))
		cleanupPhase(t, ctx, setup, c.namespace)
	}
	if f := leaseFailed.Load(); f > 0 {
		t.Errorf("%d Lease renewals of the simulated kubelets failed", f)
	}
}

// liveHeap is the heap in use after a collection, and the goroutines.
func liveHeap() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}

// perNode says counts per node.
func perNode(c [reqKinds]int64, n int) string {
	return fmt.Sprintf("watch %.1f, read %.1f, write %.1f per node", float64(c[reqWatch])/float64(n), float64(c[reqRead])/float64(n),
		float64(c[reqWrite])/float64(n))
}

// fleetClass is one DeviceClass of the scheduler phase, with the
// namespace its pods and template are in.
type fleetClass struct {
	label, namespace string
	class            *resourceapi.DeviceClass
}

// fleetClasses are the install's DeviceClass (deploy/dra/deviceclass.yaml,
// its CEL selector) and a plain one of no selector.
func fleetClasses(t *testing.T) []fleetClass {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy/dra/deviceclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped resourceapi.DeviceClass
	if err := yaml.UnmarshalStrict(b, &shipped); err != nil {
		t.Fatalf("deploy/dra/deviceclass.yaml: %v", err)
	}
	var cel []string
	for _, s := range shipped.Spec.Selectors {
		if s.CEL != nil {
			cel = append(cel, s.CEL.Expression)
		}
	}
	if len(cel) == 0 {
		t.Fatalf("deploy/dra/deviceclass.yaml: DeviceClass %s has no CEL selector: nothing to compare", shipped.Name)
	}
	t.Logf("DeviceClass %s's CEL: %s", shipped.Name, strings.Join(cel, "; "))
	plain := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "plain.fleet.rdma-chain.github.io"}}
	return []fleetClass{{"shipped", "fleet-shipped", &shipped}, {"plain", "fleet-plain", plain}}
}

// createGatedPods makes, for each class, its DeviceClass, a namespace
// with a ResourceClaimTemplate of one device of the class, and count
// pods each with a claim from the template and the scheduling gate
// fleetGate; no kubelet runs them.
func createGatedPods(ctx context.Context, c kubernetes.Interface, classes []fleetClass, count int) error {
	for _, fc := range classes {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, fc.class, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fc.namespace}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rdma", Namespace: fc.namespace},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: fc.class.Name}}}}}}}
		if _, err := c.ResourceV1().ResourceClaimTemplates(fc.namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			return err
		}
		// The ServiceAccount admission wants the namespace's default
		// ServiceAccount, which kube-controller-manager makes.
		for {
			if _, err := c.CoreV1().ServiceAccounts(fc.namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
				break
			} else if !apierrors.IsNotFound(err) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return forEach(ctx, count*len(classes), 16, func(i int) error {
		fc := classes[i%len(classes)]
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i/len(classes)), Namespace: fc.namespace},
			Spec: corev1.PodSpec{
				SchedulingGates:               []corev1.PodSchedulingGate{{Name: fleetGate}},
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "rdma", ResourceClaimTemplateName: ptr.To("rdma")}},
				Containers: []corev1.Container{{Name: "c", Image: "localhost/fleet:never-run",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "rdma"}}}}},
			},
		}
		_, err := c.CoreV1().Pods(fc.namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

// claimWatch records the claims of every namespace: how many were made,
// and when each was first seen allocated.
type claimWatch struct {
	mu        sync.Mutex
	made      map[string]map[types.UID]bool
	allocated map[string]map[types.UID]time.Time
}

func newClaimWatch(ctx context.Context, c kubernetes.Interface) *claimWatch {
	w := &claimWatch{made: map[string]map[types.UID]bool{}, allocated: map[string]map[types.UID]time.Time{}}
	go watchEach(ctx, func(rv string) (watch.Interface, error) {
		return c.ResourceV1().ResourceClaims("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	}, func(typ watch.EventType, obj metav1.Object) {
		claim, ok := obj.(*resourceapi.ResourceClaim)
		if !ok || typ == watch.Deleted {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		ns := claim.Namespace
		if w.made[ns] == nil {
			w.made[ns], w.allocated[ns] = map[types.UID]bool{}, map[types.UID]time.Time{}
		}
		w.made[ns][claim.UID] = true
		if _, seen := w.allocated[ns][claim.UID]; !seen && claim.Status.Allocation != nil {
			w.allocated[ns][claim.UID] = time.Now()
		}
	})
	return w
}

func (w *claimWatch) created(ns string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.made[ns])
}

// allocation is how many claims of ns are allocated and when the last
// one was.
func (w *claimWatch) allocation(ns string) (int, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, at := range w.allocated[ns] {
		if at.After(last) {
			last = at
		}
	}
	return len(w.allocated[ns]), last
}

// waitUntainted waits until no Node has a taint: the node lifecycle
// controller lifts the not-ready taint the API server gives a new Node
// once it sees the node Ready and its Lease renewed.
func waitUntainted(t *testing.T, ctx context.Context, c kubernetes.Interface, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Minute, func() (bool, string) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var tainted []string
		for _, node := range nodes.Items {
			if len(node.Spec.Taints) > 0 {
				tainted = append(tainted, fmt.Sprintf("%s %v", node.Name, node.Spec.Taints))
			}
		}
		if len(nodes.Items) == n && len(tainted) == 0 {
			return true, ""
		}
		time.Sleep(2 * time.Second)
		return false, fmt.Sprintf("%d nodes, %d tainted: %s", len(nodes.Items), len(tainted), strings.Join(tainted[:min(3, len(tainted))], "; "))
	})
}

// schedulePhase lifts the gate of every pod of fc's namespace and waits
// until all count claims are allocated: claims per second from the first
// pod's gate lifted to the last allocation, and the scheduler's CPU per
// claim over that time.
func schedulePhase(t *testing.T, ctx context.Context, c kubernetes.Interface, claims *claimWatch, sched *proc, fc fleetClass, count int) classFigures {
	t.Helper()
	cpu0 := sched.cpuTime(t)
	start := time.Now()
	patch := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
	err := forEach(ctx, count, 16, func(i int) error {
		_, err := c.CoreV1().Pods(fc.namespace).Patch(ctx, fmt.Sprintf("p-%05d", i), types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("lift the pods' scheduling gate: %v", err)
	}
	ungated := time.Since(start)
	var last time.Time
	testenv.Eventually(t, 20*time.Minute, func() (bool, string) {
		var got int
		got, last = claims.allocation(fc.namespace)
		if got == count {
			return true, ""
		}
		time.Sleep(200 * time.Millisecond)
		return false, fmt.Sprintf("%d of %d claims of %s allocated after %.0f s", got, count, fc.namespace, time.Since(start).Seconds()) +
			unschedulable(ctx, c, fc.namespace)
	})
	cpu := sched.cpuTime(t) - cpu0
	d := last.Sub(start)
	f := classFigures{class: fc.label, perSecond: float64(count) / d.Seconds(), schedCPUPerClaim: float64(cpu.Milliseconds()) / float64(count)}
	t.Logf("%s class: %d claims allocated in %.1f s (gates lifted in %.1f s): %.1f claims/s, kube-scheduler %.1f CPU-s (%.1f ms a claim)",
		fc.label, count, d.Seconds(), ungated.Seconds(), f.perSecond, cpu.Seconds(), f.schedCPUPerClaim)
	return f
}

// unschedulable is, for a failure message, the scheduler's reason for
// one pod of ns that it could not place.
func unschedulable(ctx context.Context, c kubernetes.Interface, ns string) string {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 500})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason != "SchedulingGated" {
				return fmt.Sprintf("; pod %s: %s: %s", p.Name, cond.Reason, cond.Message)
			}
		}
	}
	return ""
}

// cleanupPhase removes the phase's pods (at once: no kubelet confirms)
// and claims (their finalizer lifted: the resourceclaim controller would
// take minutes at its rate), and waits until none is left.
func cleanupPhase(t *testing.T, ctx context.Context, c kubernetes.Interface, ns string) {
	t.Helper()
	start := time.Now()
	if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the pods of %s: %v", ns, err)
	}
	if err := c.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the claims of %s: %v", ns, err)
	}
	testenv.Eventually(t, 10*time.Minute, func() (bool, string) {
		left, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(left.Items) == 0 && len(pods.Items) == 0 {
			return true, ""
		}
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_ = forEach(ctx, len(left.Items), 16, func(i int) error {
			_, err := c.ResourceV1().ResourceClaims(ns).Patch(ctx, left.Items[i].Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		time.Sleep(time.Second)
		return false, fmt.Sprintf("%d claims and %d pods of %s left", len(left.Items), len(pods.Items), ns)
	})
	t.Logf("%s cleaned up in %.1f s", ns, time.Since(start).Seconds())
}

// procByName is the control plane's part name.
func (cp *controlPlane) procByName(t *testing.T, name string) *proc {
	t.Helper()
	for _, p := range cp.procs {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no %s in the control plane", name)
	return nil
}

// cpuTime is the part's user and system CPU time so far (/proc/PID/stat,
// in clock ticks of 10 ms: Linux's USER_HZ).
func (p *proc) cpuTime(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s's CPU time: %v", p.name, err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	// After the command: state is the first field, utime the 12th, stime the 13th.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("%s's /proc stat: %q", p.name, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
