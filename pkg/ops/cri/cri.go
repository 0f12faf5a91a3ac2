// Package cri lists a container runtime's pod sandboxes through the CRI
// runtime v1 API (RuntimeService.ListPodSandbox) over its gRPC socket.
//
// The messages are encoded with protowire instead of the k8s.io/cri-api
// generated types: that package registers the whole CRI descriptor at
// program start, and this binary is also the CNI plugin, started for every
// pod. The tests check the encoding against the generated types.
package cri

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
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
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", socket, err)
	}
	defer conn.Close()
	var resp rawMsg
	req := rawMsg{} // ListPodSandboxRequest without a filter: every sandbox
	err = conn.Invoke(ctx, ListMethod, &req, &resp, grpc.ForceCodec(codec{}), grpc.MaxCallRecvMsgSize(maxRecv))
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox on %s: %w", socket, err)
	}
	return DecodeList(resp)
}

// rawMsg is an already encoded protobuf message.
type rawMsg []byte

// codec passes encoded messages through; its name makes the content type
// application/grpc+proto, as the runtime expects.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("cannot encode %T", v)
	}
	return *m, nil
}

func (codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("cannot decode into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

// DecodeList decodes a ListPodSandboxResponse (items = 1).
func DecodeList(b []byte) ([]Sandbox, error) {
	var out []Sandbox
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		s, err := decodeSandbox(v)
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
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			s.ID = string(v)
		case num == 2 && typ == protowire.BytesType:
			return decodeMetadata(v, &s)
		case num == 3 && typ == protowire.VarintType:
			s.State = int32(n)
		}
		return nil
	})
	return s, err
}

// decodeMetadata decodes PodSandboxMetadata: name = 1, uid = 2, namespace = 3.
func decodeMetadata(b []byte, s *Sandbox) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			s.Name = string(v)
		case 2:
			s.UID = string(v)
		case 3:
			s.Namespace = string(v)
		}
		return nil
	})
}

// fields walks the fields of one message; fn gets the bytes of a
// length-delimited field or the value of a varint.
func fields(b []byte, fn func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
