package netns

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// cnitool runs the real cnitool in the node netns, as an operator would.
func (n *node) cnitool(t *testing.T, p *pod, verb string) (string, error) {
	t.Helper()
	tool := testenv.RequireBinary(t, "cnitool", testenv.ToolsDir("bin"))
	cmd := exec.Command("ip", "netns", "exec", filepath.Base(n.ns.Path()), tool, verb, netName, p.rt.NetNS)
	cmd.Env = append(os.Environ(),
		"NETCONFPATH="+n.confDir, "CNI_PATH="+n.binDir, "CNI_CACHE_DIR="+filepath.Join(n.dir, "cache"),
		"CNI_CONTAINERID="+p.rt.ContainerID,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=uid-web",
		`CAP_ARGS={"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"maybe"}}`)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCnitool checks that the chain runs through cnitool at both versions:
// ADD prints ptp's result, CHECK, STATUS and GC pass, DEL works twice.
func TestCnitool(t *testing.T) {
	testenv.Privileged(t)
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, v, map[string]any{"logFile": "/dev/null"})
			n.kubelet(fakekubelet.Pod{Namespace: "default", Name: "web", Resources: map[string][]string{"example.com/gpu": {"0"}}})
			p := n.pod("web")
			out, err := n.cnitool(t, p, "add")
			if err != nil {
				t.Fatalf("cnitool add: %v\n%s", err, out)
			}
			start := strings.Index(out, "{")
			if start < 0 {
				t.Fatalf("cnitool add printed no result:\n%s", out)
			}
			jsonPart := out[start:]
			var res map[string]any
			if err := json.Unmarshal([]byte(jsonPart), &res); err != nil || res["cniVersion"] != v {
				t.Fatalf("cnitool add output: %v\n%s", err, out)
			}
			if strings.Contains(jsonPart, `"rdma0"`) {
				t.Errorf("pass-through pod got an RDMA interface: %s", jsonPart)
			}
			verbs := []string{"check", "del", "del"}
			if v == "1.1.0" {
				verbs = []string{"check", "status", "gc", "del", "del"}
			}
			for _, verb := range verbs {
				if out, err := n.cnitool(t, p, verb); err != nil {
					t.Fatalf("cnitool %s: %v\n%s", verb, err, out)
				}
			}
		})
	}
}
