// Package cri lists a container runtime's pod sandboxes through the CRI
// runtime v1 API (RuntimeService.ListPodSandbox) over its gRPC socket.
//
// The messages are decoded by hand (internal/pbwire) and the call is one
// unary gRPC call (internal/grpcunix) instead of the k8s.io/cri-api generated
// types over a grpc-go ClientConn: this binary is also the CNI plugin,
// started for every pod, and pays at each start for what it links. The tests
// check the decoding against the generated types and the call against
// grpc-go's server.
package cri

import (
	"context"
	"fmt"

	"github.com/rdma-chain/rdma-chain/internal/grpcunix"
	"github.com/rdma-chain/rdma-chain/internal/pbwire"
)

// ListMethod is the full gRPC method name of ListPodSandbox.
const ListMethod = "/runtime.v1.RuntimeService/ListPodSandbox"

const maxRecv = 64 << 20

// Sandbox states (runtime.v1.PodSandboxState).
const (
	StateReady    = 0
	StateNotReady = 1
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
	// An empty ListPodSandboxRequest: no filter, every sandbox.
	resp, err := grpcunix.Call(ctx, socket, ListMethod, nil, maxRecv)
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox on %s: %w", socket, err)
	}
	return DecodeList(resp)
}

// DecodeList decodes a ListPodSandboxResponse (items = 1).
func DecodeList(b []byte) ([]Sandbox, error) {
	var out []Sandbox
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Num != 1 || f.Type != pbwire.Bytes {
			return nil
		}
		s, err := decodeSandbox(f.Bytes)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode ListPodSandboxResponse: %w", err)
	}
	return out, nil
}

// decodeSandbox decodes a PodSandbox: id = 1, metadata = 2, state = 3.
func decodeSandbox(b []byte) (Sandbox, error) {
	var s Sandbox
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		switch {
		case f.Num == 1 && f.Type == pbwire.Bytes:
			s.ID = f.String()
		case f.Num == 2 && f.Type == pbwire.Bytes:
			return decodeMetadata(f.Bytes, &s)
		case f.Num == 3 && f.Type == pbwire.Varint:
			s.State = int32(f.Varint)
		}
		return nil
	})
	return s, err
}

// decodeMetadata decodes PodSandboxMetadata: name = 1, uid = 2, namespace = 3.
func decodeMetadata(b []byte, s *Sandbox) error {
	return pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Type != pbwire.Bytes {
			return nil
		}
		switch f.Num {
		case 1:
			s.Name = f.String()
		case 2:
			s.UID = f.String()
		case 3:
			s.Namespace = f.String()
		}
		return nil
	})
}
