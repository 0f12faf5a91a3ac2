package podres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// getMode selects how the fake kubelet serves Get.
type getMode int

const (
	getOK       getMode = iota // like kubelet with KubeletPodResourcesGet on
	getUnimpl                  // like a kubelet without Get
	getGateOff                 // like kubelet with the gate off
	getNotFound                // answers codes.NotFound for unknown pods
	getBroken                  // answers codes.Internal
)

// fakeKubelet serves the real PodResourcesListerServer, answering with the
// same plain errors kubelet's server_v1.go returns.
type fakeKubelet struct {
	prv1.UnimplementedPodResourcesListerServer
	pods  []*prv1.PodResources
	get   getMode
	hang  bool
	delay time.Duration // Get answers this late (or ends with its context)
	lists atomic.Int32
	gets  atomic.Int32
}

func (f *fakeKubelet) List(ctx context.Context, _ *prv1.ListPodResourcesRequest) (*prv1.ListPodResourcesResponse, error) {
	f.lists.Add(1)
	if f.hang {
		// Like kubelet's server, a hung call ends with its context's error,
		// never with a late success.
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &prv1.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func (f *fakeKubelet) Get(ctx context.Context, req *prv1.GetPodResourcesRequest) (*prv1.GetPodResourcesResponse, error) {
	f.gets.Add(1)
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch f.get {
	case getUnimpl:
		return f.UnimplementedPodResourcesListerServer.Get(ctx, req)
	case getGateOff:
		return nil, fmt.Errorf("PodResources API Get method disabled")
	case getBroken:
		return nil, status.Error(codes.Internal, "boom")
	}
	for _, p := range f.pods {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &prv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	if f.get == getNotFound {
		return nil, status.Error(codes.NotFound, "no such pod")
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// serve starts f on a unix socket and returns the socket path.
func serve(t *testing.T, f *fakeKubelet, opts ...grpc.ServerOption) string {
	t.Helper()
	sock := filepath.Join(testenv.SocketDir(t), "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	prv1.RegisterPodResourcesListerServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return sock
}

func ctr(name string, devs ...*prv1.ContainerDevices) *prv1.ContainerResources {
	return &prv1.ContainerResources{Name: name, Devices: devs}
}

func dev(resource string, ids ...string) *prv1.ContainerDevices {
	return &prv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func pod(ns, name string, ctrs ...*prv1.ContainerResources) *prv1.PodResources {
	return &prv1.PodResources{Namespace: ns, Name: name, Containers: ctrs}
}

var resources = []string{"aliyun/erdma", "rdma/hca"}

func testPods() []*prv1.PodResources {
	return []*prv1.PodResources{
		pod("other", "web", ctr("c", dev("rdma/hca", "wrong"))),
		pod("default", "web",
			ctr("sidecar", dev("rdma/hca", "mlx5_1")),
			ctr("main",
				dev("nvidia.com/gpu", "GPU-0"),
				dev("aliyun/erdma", "erdma_0", "erdma_1"),
				dev("rdma/hca", "mlx5_0", "mlx5_1")),
			ctr("second", dev("aliyun/erdma", "erdma_1", "erdma_2"))),
		pod("default", "plain", ctr("c", dev("nvidia.com/gpu", "GPU-1"))),
	}
}

func TestAllocated(t *testing.T) {
	webWant := []Allocation{
		{ResourceName: "aliyun/erdma", DeviceIDs: []string{"erdma_0", "erdma_1", "erdma_2"}},
		{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_1", "mlx5_0"}},
	}
	tests := []struct {
		name      string
		get       getMode
		pod       string
		resources []string
		want      []Allocation
		wantLists int32
		wantErr   bool
	}{
		{name: "get merges containers", get: getOK, pod: "web", resources: resources, want: webWant},
		{name: "get one resource", get: getOK, pod: "web", resources: []string{"rdma/hca", "rdma/hca"}, want: webWant[1:]},
		{name: "get no matching resource", get: getOK, pod: "plain", resources: resources, want: []Allocation{}},
		{name: "get pod not found", get: getOK, pod: "ghost", resources: resources, want: []Allocation{}},
		{name: "get NotFound code", get: getNotFound, pod: "ghost", resources: resources, want: []Allocation{}},
		{name: "unimplemented falls back to list", get: getUnimpl, pod: "web", resources: resources, want: webWant, wantLists: 1},
		{name: "disabled falls back to list", get: getGateOff, pod: "web", resources: resources, want: webWant, wantLists: 1},
		{name: "list pod not found", get: getUnimpl, pod: "ghost", resources: resources, want: []Allocation{}, wantLists: 1},
		{name: "other get error", get: getBroken, pod: "web", resources: resources, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeKubelet{pods: testPods(), get: tt.get}
			got, err := New(serve(t, f), 0).Allocated(context.Background(), "default", tt.pod, tt.resources)
			if tt.wantErr {
				if err == nil || errors.Is(err, ErrUnavailable) {
					t.Fatalf("err = %v, want a non-ErrUnavailable error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if n := f.lists.Load(); n != tt.wantLists {
				t.Errorf("List called %d times, want %d", n, tt.wantLists)
			}
		})
	}
}

func TestAllocatedInvalidInput(t *testing.T) {
	c := New(filepath.Join(testenv.SocketDir(t), "missing.sock"), 0)
	for _, in := range [][2]string{{"", "web"}, {"default", ""}} {
		_, err := c.Allocated(context.Background(), in[0], in[1], resources)
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Allocated(%q, %q) err = %v, want a validation error", in[0], in[1], err)
		}
	}
}

// TestUnavailable covers Allocated and Probe against sockets nothing
// serves: ErrUnavailable at once, never ErrBusy.
func TestUnavailable(t *testing.T) {
	calls := map[string]func(*Client) error{
		"allocated": func(c *Client) error {
			_, err := c.Allocated(context.Background(), "default", "web", resources)
			return err
		},
		"probe": func(c *Client) error { return c.Probe(context.Background()) },
	}
	socks := map[string]func(t *testing.T) string{
		"missing socket": func(t *testing.T) string { return filepath.Join(testenv.SocketDir(t), "missing.sock") },
		"not a socket": func(t *testing.T) string {
			p := filepath.Join(testenv.SocketDir(t), "file.sock")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
	for sname, mkSock := range socks {
		for cname, call := range calls {
			t.Run(sname+"/"+cname, func(t *testing.T) {
				sock := mkSock(t)
				err := call(New(sock, 200*time.Millisecond))
				if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), sock) {
					t.Fatalf("err = %v, want ErrUnavailable (not ErrBusy) naming %s", err, sock)
				}
			})
		}
	}
}

// TestHangingKubelet checks that a kubelet that accepts the call and never
// answers is busy, not gone: Probe asks once within its timeout; Lookup
// asks again, each time waiting longer, until its context ends.
func TestHangingKubelet(t *testing.T) {
	f := &fakeKubelet{pods: testPods(), hang: true}
	sock := serve(t, f)
	c := New(sock, 100*time.Millisecond)
	if err := c.Probe(context.Background()); !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRateLimited) {
		t.Fatalf("Probe = %v, want ErrBusy only", err)
	}
	if n := f.gets.Load(); n != 1 {
		t.Errorf("Probe asked Get %d times, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.Lookup(ctx, "default", "web", Query{ResourceNames: resources})
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Lookup = %v, want ErrBusy naming %s", err, sock)
	}
	if n := f.gets.Load() - 1; n < 2 {
		t.Errorf("Lookup asked Get %d times, want it to ask again after a timed-out attempt", n)
	}
}

// TestSlowKubelet checks that a kubelet that answers every call late, but
// within the lookup's budget, is waited for: the attempt after a timed-out
// one has the rest of the budget, not twice the last attempt's time.
func TestSlowKubelet(t *testing.T) {
	f := &fakeKubelet{pods: testPods(), delay: 1600 * time.Millisecond}
	c := New(serve(t, f), 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	got, err := c.Lookup(ctx, "default", "web", Query{ResourceNames: resources})
	if err != nil || !got.Known {
		t.Fatalf("Lookup = %+v, %v after %d calls, want web's answer", got, err, f.gets.Load())
	}
	t.Logf("served after %d calls in %v", f.gets.Load(), time.Since(start).Round(time.Millisecond))
}

// refuseFirst answers ResourceExhausted, as kubelet's rate limit does, to
// the first n calls, then serves; it counts the calls.
func refuseFirst(n int32, calls *atomic.Int32) grpc.ServerOption {
	return grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if calls.Add(1) <= n {
			return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
		}
		return h(ctx, req)
	})
}

// TestRateLimited checks that Lookup asks again what kubelet's rate
// limit refused, until the budget ends; Probe asks once.
func TestRateLimited(t *testing.T) {
	webWant := []Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"mlx5_1", "mlx5_0"}}}
	tests := []struct {
		name      string
		refuse    int32
		probe     bool
		wantCalls int32
		wantErr   bool
	}{
		{name: "lookup served after refusals", refuse: 5, wantCalls: 6},
		{name: "lookup refused past the budget", refuse: 1 << 30, wantErr: true},
		{name: "probe refused once", refuse: 1, probe: true, wantCalls: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			sock := serve(t, &fakeKubelet{pods: testPods()}, refuseFirst(tt.refuse, &calls))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			if tt.probe {
				err = New(sock, 0).Probe(ctx)
			} else {
				var got *Pod
				got, err = New(sock, 0).Lookup(ctx, "default", "web", Query{ResourceNames: []string{"rdma/hca"}})
				if err == nil && !reflect.DeepEqual(got.Devices, webWant) {
					t.Errorf("devices %+v, want %+v", got.Devices, webWant)
				}
			}
			if tt.wantErr {
				if !errors.Is(err, ErrRateLimited) || !errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "rate limit") {
					t.Fatalf("err = %v, want ErrRateLimited naming the rate limit", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); tt.wantCalls != 0 && n != tt.wantCalls {
				t.Errorf("%d calls, want %d", n, tt.wantCalls)
			}
		})
	}
}

// TestProbe checks that Probe asks Get for a pod that cannot exist and
// lists only when kubelet does not serve Get.
func TestProbe(t *testing.T) {
	tests := []struct {
		name      string
		get       getMode
		wantLists int32
		wantErr   bool
	}{
		{name: "get answers not found", get: getOK},
		{name: "get answers NotFound code", get: getNotFound},
		{name: "unimplemented lists", get: getUnimpl, wantLists: 1},
		{name: "disabled lists", get: getGateOff, wantLists: 1},
		{name: "other get error", get: getBroken, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeKubelet{pods: testPods(), get: tt.get}
			sock := serve(t, f)
			err := New(sock, 0).Probe(context.Background())
			if tt.wantErr != (err != nil) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("Probe = %v, want error %v (never ErrUnavailable)", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), sock) {
				t.Errorf("error %q does not name %s", err, sock)
			}
			if n := f.lists.Load(); n != tt.wantLists {
				t.Errorf("List called %d times, want %d", n, tt.wantLists)
			}
		})
	}
}

func TestNewDefaultTimeout(t *testing.T) {
	if c := New(DefaultSocket, 0); c.timeout != DefaultTimeout {
		t.Errorf("timeout = %v, want %v", c.timeout, DefaultTimeout)
	}
}

// TestServing checks that Serving connects without a call: kubelet's
// rate limit sees nothing. Nothing listening, or a close before any
// byte, is ErrUnavailable; a listener that accepts and says nothing is
// ErrBusy.
func TestServing(t *testing.T) {
	lim := fakekubelet.NewLimiter()
	rawListener := func(t *testing.T, closeAtOnce bool) string {
		sock := filepath.Join(testenv.SocketDir(t), "raw.sock")
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lis.Close() })
		go func() {
			for {
				conn, err := lis.Accept()
				if err != nil {
					return
				}
				if closeAtOnce {
					_ = conn.Close()
					continue
				}
				t.Cleanup(func() { _ = conn.Close() })
			}
		}()
		return sock
	}
	tests := []struct {
		name string
		sock func(t *testing.T) string
		want error // nil, ErrUnavailable or ErrBusy
	}{
		{"grpc-go serving kubelet's service", func(t *testing.T) string {
			return serve(t, &fakeKubelet{pods: testPods()}, lim.ServerOption())
		}, nil},
		{"missing socket", func(t *testing.T) string { return filepath.Join(testenv.SocketDir(t), "missing.sock") }, ErrUnavailable},
		{"not a socket", func(t *testing.T) string {
			p := filepath.Join(testenv.SocketDir(t), "file.sock")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, ErrUnavailable},
		{"closed at once", func(t *testing.T) string { return rawListener(t, true) }, ErrUnavailable},
		{"silent listener", func(t *testing.T) string { return rawListener(t, false) }, ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := tt.sock(t)
			err := New(sock, 200*time.Millisecond).Serving(context.Background())
			switch {
			case tt.want == nil && err != nil:
				t.Fatal(err)
			case tt.want != nil && (!errors.Is(err, tt.want) || errors.Is(err, ErrUnavailable) == errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), sock)):
				t.Fatalf("err = %v, want %v naming %s", err, tt.want, sock)
			}
		})
	}
	if n := lim.Served.Load() + lim.Refused.Load(); n != 0 {
		t.Errorf("kubelet's rate limit saw %d calls, want none", n)
	}
}
