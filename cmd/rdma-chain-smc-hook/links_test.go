package main

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestLinks is the hook loader's link guard: it loads and attaches the
// socket hook with cilium/ebpf, which is why the plugin runs it as a
// binary of its own instead of linking the library (docs/design.md).
func TestLinks(t *testing.T) {
	linked := testenv.LinkedPackages(t, "./cmd/rdma-chain-smc-hook")
	if !linked["github.com/cilium/ebpf"] {
		t.Error("rdma-chain-smc-hook does not link github.com/cilium/ebpf")
	}
	if p, ok := testenv.LinksUnder(linked, "github.com/prometheus"); ok {
		t.Errorf("rdma-chain-smc-hook links %s: the plugin runs it for a node's first SMC-R pod, it serves no metrics", p)
	}
}
