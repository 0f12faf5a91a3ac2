package cri

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime serves ListPodSandbox with the generated CRI types.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	items []*runtimeapi.PodSandbox
	got   atomic.Pointer[runtimeapi.ListPodSandboxRequest]
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.got.Store(req)
	return &runtimeapi.ListPodSandboxResponse{Items: f.items}, nil
}

func sandboxes() []*runtimeapi.PodSandbox {
	return []*runtimeapi.PodSandbox{
		{Id: "a1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-a", Uid: "uid-a", Namespace: "default", Attempt: 2},
			State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 12345,
			Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"network.alibabacloud.com/erdma-smcr": "true"},
			RuntimeHandler: "runc"},
		{Id: "b2", Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-b", Namespace: "kube-system"},
			State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		{Id: "c3"},
	}
}

var want = []Sandbox{
	{ID: "a1", Name: "pod-a", Namespace: "default", UID: "uid-a", State: StateReady},
	{ID: "b2", Name: "pod-b", Namespace: "kube-system", State: StateNotReady},
	{ID: "c3"},
}

// TestListOverGRPC checks that the client talks to a server registered
// with the generated CRI service over a unix socket.
func TestListOverGRPC(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeRuntime{items: sandboxes()}
	runtimeapi.RegisterRuntimeServiceServer(srv, fake)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := List(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("listed %+v\nwant %+v", got, want)
	}
	if got := fake.got.Load(); got == nil || got.Filter != nil {
		t.Errorf("request %v: want no filter", got)
	}
}

func TestListNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := List(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Fatal("no error without a server")
	}
}
