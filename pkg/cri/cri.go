// Package cri lists a container runtime's pod sandboxes through the CRI
// runtime v1 API (RuntimeService.ListPodSandbox) over its gRPC socket, with
// grpc-go and the generated k8s.io/cri-api client. It is linked only into
// the operator binary (rdma-chain-ops), whose start-up does not matter.
package cri

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxRecv bounds a ListPodSandbox reply (kubelet's own CRI client allows
// 16 MiB; a node with thousands of sandboxes stays far below this).
const maxRecv = 64 << 20

// Sandbox states (runtime.v1.PodSandboxState).
const (
	StateReady    = int32(runtimeapi.PodSandboxState_SANDBOX_READY)
	StateNotReady = int32(runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
)

// Sandbox is the part of a CRI PodSandbox that reconcile needs.
type Sandbox struct {
	ID        string
	Name      string
	Namespace string
	UID       string
	State     int32
}

// List returns every pod sandbox the runtime at socket (a unix socket path)
// knows, ready or not.
func List(ctx context.Context, socket string) ([]Sandbox, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", socket, err)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)))
	if err != nil {
		return nil, fmt.Errorf("CRI client for %s: %w", socket, err)
	}
	defer func() { _ = conn.Close() }()
	// An empty request: no filter, every sandbox.
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox on %s: %w", socket, err)
	}
	out := make([]Sandbox, 0, len(resp.GetItems()))
	for _, s := range resp.GetItems() {
		m := s.GetMetadata()
		out = append(out, Sandbox{ID: s.GetId(), Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUid(), State: int32(s.GetState())})
	}
	return out, nil
}
