package main

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestLinks is the CNI plugin binary's link guard. The plugin starts for
// every pod on every verb, so every package it links costs package
// initialisation and size on each start (docs/performance.md), and
// docs/design.md relies on what it leaves out.
func TestLinks(t *testing.T) {
	linked := testenv.LinkedPackages(t, "./plugins/meta/rdma-chain")
	forbidden := []struct{ prefix, why string }{
		{"google.golang.org/grpc", "kubelet's pod-resources API is spoken by internal/grpcunix"},
		{"google.golang.org/protobuf", "kubelet's Get and List are encoded by internal/pbwire"},
		{"k8s.io/kubelet", "the generated pod-resources API would bring protobuf back"},
		{"github.com/cilium/ebpf", "the hook's pinned map is reached by raw bpf(2) in pkg/smc/hookmap; the loader binary links cilium/ebpf"},
		{"github.com/prometheus", "metrics are served by rdma-chain-ops"},
		{"k8s.io/client-go", "the plugin holds no API credentials; claims come from kubelet's pod-resources socket"},
		{"k8s.io/dynamic-resource-allocation", "the DRA libraries belong to rdma-chain-dra"},
		{"tags.cncf.io/container-device-interface", "CDI specs are written by rdma-chain-dra"},
		{"github.com/rdma-chain/rdma-chain/pkg/dra", "the DRA driver's package belongs to rdma-chain-dra"},
	}
	for _, f := range forbidden {
		if p, ok := testenv.LinksUnder(linked, f.prefix); ok {
			t.Errorf("the CNI plugin links %s: %s", p, f.why)
		}
	}
	for _, p := range []string{"github.com/rdma-chain/rdma-chain/internal/pbwire", "github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"} {
		if !linked[p] {
			t.Errorf("the CNI plugin does not link %s: go list listed another binary's packages", p)
		}
	}
}
