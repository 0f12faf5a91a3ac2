package main

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestLinks is the DRA driver's link guard: it is the only binary with API
// credentials, so the API client, the DRA libraries and the driver's
// package are linked here, and not by the plugin (its own guard,
// plugins/meta/rdma-chain).
func TestLinks(t *testing.T) {
	linked := testenv.LinkedPackages(t, "./cmd/rdma-chain-dra")
	for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/dynamic-resource-allocation/kubeletplugin",
		"github.com/rdma-chain/rdma-chain/pkg/dra"} {
		if !linked[p] {
			t.Errorf("rdma-chain-dra does not link %s", p)
		}
	}
}
