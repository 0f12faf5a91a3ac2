//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/rdma-chain/rdma-chain/pkg/dra"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Kinds of API request, as a client sends them.
const (
	reqWatch = iota
	reqRead
	reqWrite
	reqKinds
)

// requestKind sorts a request: a GET with watch=true (or 1) is a watch
// (the watch-list's initial list too), any other GET or HEAD a read,
// anything else a write.
func requestKind(r *http.Request) int {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
			return reqWatch
		}
		return reqRead
	}
	return reqWrite
}

// reqCounter counts the requests of clients by kind; while recording, it
// keeps the first writes and reads (method and path), to name them.
type reqCounter struct {
	n         [reqKinds]atomic.Int64
	recording atomic.Bool
	mu        sync.Mutex
	seen      []string
}

func (c *reqCounter) snapshot() (out [reqKinds]int64) {
	for i := range out {
		out[i] = c.n[i].Load()
	}
	return out
}

// record starts or ends keeping the writes and reads seen, and returns
// those kept since the last start.
func (c *reqCounter) record(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.seen
	c.seen = nil
	c.recording.Store(on)
	return out
}

// wrap is rest.Config.Wrap's: it counts every request the client sends.
func (c *reqCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{c: c, rt: rt}
}

type countingTransport struct {
	c  *reqCounter
	rt http.RoundTripper
}

func (ct countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	k := requestKind(r)
	ct.c.n[k].Add(1)
	if k != reqWatch && ct.c.recording.Load() {
		ct.c.mu.Lock()
		if len(ct.c.seen) < 20 {
			ct.c.seen = append(ct.c.seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		}
		ct.c.mu.Unlock()
	}
	return ct.rt.RoundTrip(r)
}

// adminConfig is the admin kubeconfig as the driver reads one
// (--kubeconfig).
func adminConfig(t *testing.T, cp *controlPlane) *rest.Config {
	t.Helper()
	c, err := clientcmd.BuildConfigFromFlags("", cp.admin)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleetClient is a client of config counted by c, with a transport (and
// connection) of its own: a Proxy function makes client-go build a
// transport per client instead of sharing one per TLS configuration, as
// every driver pod has its own. qps 0 keeps client-go's default (5, burst
// 10), which the driver runs with.
func fleetClient(t *testing.T, base *rest.Config, c *reqCounter, agent string, qps float32) kubernetes.Interface {
	t.Helper()
	cs, err := newFleetClient(base, c, agent, qps)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// newFleetClient is fleetClient for any goroutine.
func newFleetClient(base *rest.Config, c *reqCounter, agent string, qps float32) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.UserAgent = agent
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	}
	if c != nil {
		cfg.Wrap(c.wrap)
	}
	return kubernetes.NewForConfig(cfg)
}

// fleetNodeName is simulated node i's name.
func fleetNodeName(i int) string { return fmt.Sprintf("fleet-%04d", i) }

// createFleetNodes creates n Nodes as kubelet registers one: Ready, with
// capacity for 110 pods, and each node's Lease; workers at a time.
func createFleetNodes(ctx context.Context, t *testing.T, c kubernetes.Interface, n int) []*coordinationv1.Lease {
	t.Helper()
	leases := make([]*coordinationv1.Lease, n)
	err := forEach(ctx, n, 16, func(i int) error {
		name := fleetNodeName(i)
		now := metav1.Now()
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
			corev1.ResourcePods: resource.MustParse("110")}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				"rdma-chain.github.io/fleet": "true"}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: now, LastTransitionTime: now}}},
		}
		created, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		if len(created.Status.Conditions) == 0 {
			node.ResourceVersion = created.ResourceVersion
			if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("node %s's status: %w", name, err)
			}
		}
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: created.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		if leases[i], err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s's lease: %w", name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return leases
}

// renewLeases renews each Lease every 10 s, as kubelet does, until ctx
// ends: the node lifecycle controller keeps the nodes Ready (and
// untainted) only while their kubelets renew. Each node starts at a
// random point of the interval. A failed renewal is counted in failed.
func renewLeases(ctx context.Context, c kubernetes.Interface, leases []*coordinationv1.Lease, failed *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(rand.N(10 * time.Second)):
			}
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				next, err := c.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{})
				switch {
				case err == nil:
					l = next
				case apierrors.IsConflict(err):
					if got, err := c.CoordinationV1().Leases(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{}); err == nil {
						l = got
					}
				case ctx.Err() == nil:
					failed.Add(1)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return &wg
}

// fleetInventory is a simulated node's discovery: fleetNICs ConnectX
// ports in shared mode, RoCE, up, two PCIe roots per NUMA node.
func fleetInventory() *dra.Node {
	n := &dra.Node{Mode: rdma.ModeShared, Skipped: map[string]string{}}
	for j := range fleetNICs {
		name := fmt.Sprintf("mlx5_%d", j)
		bus := 0x1a + 0x20*j
		n.NICs = append(n.NICs, dra.NIC{
			Device: rdma.Device{Name: name, Driver: "mlx5_core", NodeGUID: fmt.Sprintf("b859:9f03:00%02x:%04x", j, 0x1a2b),
				Netdev: fmt.Sprintf("ens%df0np0", 10+j), PCI: fmt.Sprintf("0000:%02x:00.0", bus+1)},
			DRAName: rdma.DRADeviceName(name), LinkLayer: "Ethernet", PortState: "ACTIVE", GIDTableSize: fleetGIDs,
			PCIeRoot: fmt.Sprintf("pci0000:%02x", bus), NUMANode: j / (fleetNICs / 2),
		})
	}
	return n
}

// fleetDriver is one simulated node's driver: the ResourceSlice
// controller publishing its slice and its claim status writer, on a
// client of its own.
type fleetDriver struct {
	ctrl *resourceslice.Controller
	done chan struct{}
}

// startFleetDriver runs, for node, what rdma-chain-dra runs against the
// API: its devices (dra.Devices of the fake inventory) in the pool and
// slice it publishes them in (dra.Resources), by the ResourceSlice
// controller started with the options kubelet's plugin helper gives it
// (kubeletplugin.Helper.PublishResources: the Node as owner, its UID
// looked up by the controller), and its claim status writer (every 2 s,
// the DaemonSet's --status-interval) over an empty node: no attachment
// records, never changed. The kubelet plugin's sockets and the kernel's
// events are the node's, not the API's, and are not run. errs counts the
// controller's errors.
func startFleetDriver(ctx context.Context, client kubernetes.Interface, node string, inv *dra.Node, errs *atomic.Int64) (*fleetDriver, error) {
	res := dra.Resources(node, dra.Devices(inv))
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: dra.DriverName,
		KubeClient: client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
		Resources:  &res,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			errs.Add(1)
		},
	})
	if err != nil {
		return nil, err
	}
	w := &dra.StatusWriter{Client: client, Pool: node, Records: func() ([]*state.Record, error) { return nil, nil },
		Changed: func() bool { return false }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := &fleetDriver{ctrl: ctrl, done: make(chan struct{})}
	go func() { defer close(d.done); w.Run(ctx, 2*time.Second) }()
	return d, nil
}

// stop waits for the driver to end once its context has.
func (d *fleetDriver) stop() {
	d.ctrl.Stop()
	<-d.done
}

// forEach runs f for 0..n-1 on workers goroutines and returns the first
// error.
func forEach(ctx context.Context, n, workers int, f func(i int) error) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return ctx.Err()
}

// watchEach watches what start watches from resource version rv and calls
// handle for each object event until ctx ends, watching again from the
// last version seen when the server ends the watch (from the start after
// an error: handle takes repeats).
func watchEach(ctx context.Context, start func(rv string) (watch.Interface, error), handle func(watch.EventType, metav1.Object)) {
	rv := ""
	for ctx.Err() == nil {
		w, err := start(rv)
		if err != nil {
			rv = ""
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = ""
				break
			}
			obj, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type != watch.Bookmark {
				handle(ev.Type, obj)
			}
		}
		w.Stop()
	}
}

// sliceWatch records, for each node, when the driver's slice of its pool
// first appeared and how many devices it held.
type sliceWatch struct {
	mu      sync.Mutex
	first   map[string]time.Time
	devices map[string]int
}

// watchSlices watches the ResourceSlices of the fleet's n nodes; n sizes
// its maps, so that the heap the drivers take is not the watch's.
func watchSlices(ctx context.Context, c kubernetes.Interface, n int) *sliceWatch {
	s := &sliceWatch{first: make(map[string]time.Time, n), devices: make(map[string]int, n)}
	go watchEach(ctx, func(rv string) (watch.Interface, error) {
		return c.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true,
			FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + dra.DriverName})
	}, func(typ watch.EventType, obj metav1.Object) {
		sl, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || sl.Spec.NodeName == nil || typ == watch.Deleted {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.first[*sl.Spec.NodeName]; !ok {
			s.first[*sl.Spec.NodeName] = time.Now()
		}
		s.devices[*sl.Spec.NodeName] = len(sl.Spec.Devices)
	})
	return s
}

// state is how many nodes have a slice, the last one's time, and the
// nodes whose slice holds other than want devices.
func (s *sliceWatch) state(want int) (nodes int, last time.Time, wrong []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, at := range s.first {
		if at.After(last) {
			last = at
		}
		if s.devices[n] != want {
			wrong = append(wrong, fmt.Sprintf("%s (%d devices)", n, s.devices[n]))
		}
	}
	return len(s.first), last, wrong
}
