package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPluginLinksNoAPIClient: the Kubernetes API client and the DRA
// libraries belong to this binary only. The CNI plugin reads claims from
// kubelet's pod-resources socket, holds no API credentials, and would pay
// their package init and size on every start.
func TestPluginLinksNoAPIClient(t *testing.T) {
	forbidden := []string{"k8s.io/client-go/", "k8s.io/dynamic-resource-allocation/", "tags.cncf.io/container-device-interface/",
		"github.com/rdma-chain/rdma-chain/pkg/dra"}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	plugin := deps("../../plugins/meta/rdma-chain")
	if len(plugin) < 50 {
		t.Fatalf("go list -deps listed only %d packages", len(plugin))
	}
	for _, p := range plugin {
		for _, f := range forbidden {
			if strings.HasPrefix(p+"/", f) || strings.HasPrefix(p, f) {
				t.Errorf("the CNI plugin links %s", p)
			}
		}
	}
	linked := map[string]bool{}
	for _, p := range deps(".") {
		linked[p] = true
	}
	for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/dynamic-resource-allocation/kubeletplugin", "github.com/rdma-chain/rdma-chain/pkg/dra"} {
		if !linked[p] {
			t.Errorf("rdma-chain-dra does not link %s (the check above would prove nothing)", p)
		}
	}
}
