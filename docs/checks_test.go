package docs

import (
	"strings"
	"testing"
)

// TestChecksFail checks that each check of the pages reports what it
// exists for, on a page written for it, and passes the same page put
// right.
func TestChecksFail(t *testing.T) {
	tops := trackedTopDirs(t)
	targets := makefileTargets(t)
	ops, dra := opsCommands(t), draFlags(t)
	table := configTable(t)
	paths := func(p page) []string { out, _ := pathProblems(p, tops); return out }
	makes := func(p page) []string { out, _ := makeProblems(p, targets); return out }
	commands := func(p page) []string { out, _ := commandProblems(p, ops, dra); return out }
	conflists := func(p page) []string { out, _ := conflistProblems(p, table); return out }
	used := manifestLabels(t)
	labels := func(p page) []string { out, _ := labelProblems(p, used); return out }
	cases := []struct {
		name  string
		check func(page) []string
		doc   string
		want  string // in a problem; "": none
	}{
		{"path missing", paths, "an opt-in component (`deploy/components/dra`,\n[dra.md](dra.md))", "names deploy/components/dra"},
		{"path", paths, "an opt-in component (`deploy/dra`, deploy/dra's `pkg/smc.Detect`, `integration/node/guest/etc/node/install-set-MODE.json`)", ""},
		{"path in code", paths, "```sh\nkubectl apply -k deploy/overlays/nowhere\n```", "names deploy/overlays/nowhere"},
		{"link missing", paths, "see [the guide](nothere.md#top)", "links to nothere.md#top"},
		{"link", paths, "see [the guide](install.md#uninstall), [Go](https://go.dev)", ""},
		{"make target missing", makes, "run `FUZZTIME=5m make test-everything`", "no target test-everything"},
		{"make target", makes, "```sh\nmake test-node NODE_KERNEL=6.1   # make sure\n```", ""},
		{"command missing", commands, "`rdma-chain-ops remove --conflist auto`", "no such command"},
		{"flag missing", commands, "```sh\n/rdma-chain-ops reconcile --interval 5m \\\n  --pod-resources-socket /x | grep --liveness\n```", "`rdma-chain-ops reconcile --pod-resources-socket`"},
		{"flags", commands, "`rdma-chain-ops inspect [--netns PATH] [--json] [--data-dir DIR | --conflist FILE | --cni-conf-dir DIR]...`", ""},
		{"driver flag missing", commands, "`rdma-chain-dra --nodename N`", "`rdma-chain-dra --nodename`"},
		{"driver flags", commands, "`rdma-chain-dra --node-name N --sys-root /sys`", ""},
		{"value refused", conflists, "nothing extra with `sharedLink: none`", `field "sharedLink"`},
		{"value", conflists, "nothing extra with `\"sharedLink\":{\"type\":\"none\"}` or `smcr.transparent: auto`", ""},
		{"key missing", conflists, "```json\n{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"plugins\":[{\"type\":\"ptp\"},\n {\"type\":\"rdma-chain\",\"podSelector\":\"all\"}]}\n```", `the key "podSelector"`},
		{"label of another prefix", labels, "label the nodes `rdma-chain.io/enabled=true`", "names rdma-chain.io/enabled"},
		{"label of no manifest", labels, "```sh\nkubectl label node n1 feature.node.kubernetes.io/rdma.present=true\n```", "sets feature.node.kubernetes.io/rdma.present"},
		{"label column of no manifest", labels, "```sh\nkubectl get nodes -L aliyun.accelerator/erdma\n```", "shows aliyun.accelerator/erdma"},
		{"labels", labels, "```sh\nkubectl label node n1 rdma-chain.github.io/enabled=true\nkubectl get nodes -L aliyun.accelerator/rdma,rdma-chain.github.io/enabled\n```\n`test.rdma-chain/expect`, `rdma-chain.github.io/rdma=x`, `../rdma-chain/deploy/dra`, `rdma-chain/deploy/examples/rdma-pod.yaml`", ""},
		{"nested key missing", conflists, "`--set '{\"mode\":\"auto\",\"smcr\":{\"pnetid\":\"P\"}}'`", "the key smcr.pnetid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.check(parsePage("docs/case.md", "docs", c.doc))
			if c.want == "" {
				if len(got) > 0 {
					t.Errorf("problems %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], c.want) {
				t.Errorf("problems %q, want one saying %q", got, c.want)
			}
		})
	}
}
