package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// terwayChainerList is the conflist terway-cli writes from the eni-config
// ConfigMap with datapath v2 (its own cniVersion and name, none per plugin,
// cilium-cni appended last), with the rdma-chain entry after Terway's.
const terwayChainerList = `{
  "cniVersion": "0.4.0",
  "name": "terway-chainer",
  "plugins": [
    {"bandwidth_mode": "edt", "capabilities": {"bandwidth": true}, "eniip_virtual_type": "datapathv2",
     "network_policy_provider": "ebpf", "type": "terway"},
    {"type": "rdma-chain", "mode": "shared", "sharedLink": {"type": "none"},
     "capabilities": {"io.kubernetes.cri.pod-annotations": true, "CNIDeviceInfoFile": true}},
    {"data-path": "datapathv2", "enable-debug": false, "log-file": "/var/run/cilium/cilium-cni.log", "type": "cilium-cni"}
  ]
}`

// TestValidateTerwayOrder checks that validate accepts Terway's real chain
// [terway, rdma-chain, cilium-cni] and says what it sees about the order; a
// chain without followers gets no note.
func TestValidateTerwayOrder(t *testing.T) {
	if probs := Conflist([]byte(terwayChainerList), ""); len(probs) != 0 {
		t.Errorf("problems %v", probs)
	}
	lines := OrderNotes([]byte(terwayChainerList))
	if len(lines) != 2 ||
		lines[0] != "order terway -> rdma-chain -> cilium-cni: the plugins after rdma-chain receive its result, the previous plugins' with the RDMA interface entries appended (their addresses only with reportIPs)" ||
		!strings.HasPrefix(lines[1], "cilium-cni: reads the pod's links, not the result") {
		t.Errorf("notes %q", lines)
	}
	unknown := strings.Replace(terwayChainerList, `"type": "cilium-cni"`, `"type": "my-follower"`, 1)
	if notes := OrderNotes([]byte(unknown)); len(notes) != 2 || !strings.Contains(notes[1], "my-follower: reads rdma-chain's result (unknown to validate") {
		t.Errorf("notes %q", notes)
	}
	if notes := OrderNotes([]byte(goodList)); notes != nil {
		t.Errorf("notes without followers: %q", notes)
	}
}

// TestChainingDocTerwayNotes checks that docs/chaining.md shows Terway's
// node conflist and validate's notes on it: the conflist passes validate
// and the notes are the code's, word for word.
func TestChainingDocTerwayNotes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "chaining.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Terway's chain")
	if !ok {
		t.Fatal("docs/chaining.md has no Terway section")
	}
	blocks := strings.Split(section, "```")
	if len(blocks) < 4 {
		t.Fatal("the Terway section has no conflist and notes blocks")
	}
	list := strings.TrimPrefix(blocks[1], "json\n")
	if probs := Conflist([]byte(list), ""); len(probs) != 0 {
		t.Errorf("the documented conflist: problems %v", probs)
	}
	var want []string
	for _, n := range OrderNotes([]byte(list)) {
		want = append(want, "10-terway.conflist: note: "+n)
	}
	if got := strings.TrimSpace(blocks[3]); got != strings.Join(want, "\n") {
		t.Errorf("documented notes:\n%s\nvalidate says:\n%s", got, strings.Join(want, "\n"))
	}
}
