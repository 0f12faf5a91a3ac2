package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeKubectl answers the calls of install.md's uninstall as a cluster
// would: the DaemonSet's pods run on n1, n2 and n3 (nodes selected by
// different labels), kubectl debug creates a pod and returns at once, and
// the uninstall on n2 exits 1. Every call is appended to $KUBECTL_LOG.
const fakeKubectl = `#!/bin/bash
echo "$*" >>"$KUBECTL_LOG"
case "$*" in
"-n kube-system get pods -l app=rdma-chain -o jsonpath={..spec.nodeName}") echo "n1 n2 n3" ;;
"-n kube-system get ds rdma-chain -o jsonpath={.spec.template.spec.containers[0].image}") echo "registry.example.com/rdma-chain@sha256:0123" ;;
"delete -k my-rdma-chain --cascade=foreground") echo "daemonset.apps \"rdma-chain\" deleted" ;;
"debug node/"*" --profile=sysadmin --image=registry.example.com/rdma-chain@sha256:0123 -- /rdma-chain-ops uninstall --host-root /host "*)
  node=${2#node/}
  echo "Creating debugging pod node-debugger-$node-x7k2q with container debugger on node $node." >&2 ;;
"get pod node-debugger-n2-x7k2q -o jsonpath={.status.phase}") echo Failed ;;
"get pod node-debugger-"*" -o jsonpath={.status.phase}") echo Succeeded ;;
"get pod node-debugger-"*" -o jsonpath={.spec.nodeName}") p=${3#node-debugger-}; echo "${p%-x7k2q}" ;;
"get pod node-debugger-n2-x7k2q -o jsonpath={.status.containerStatuses[0].state.terminated.exitCode}") echo 1 ;;
"get pod node-debugger-"*" -o jsonpath={.status.containerStatuses[0].state.terminated.exitCode}") echo 0 ;;
"logs node-debugger-"*) echo "log of $2" ;;
"delete pod node-debugger-"*) echo "pod \"$3\" deleted" ;;
*) echo "error: the fake cluster does not answer kubectl $*" >&2; exit 1 ;;
esac
`

// TestUninstallLoop runs the uninstall commands of install.md against a
// fake kubectl: the uninstall runs on every node the DaemonSet's pods ran
// on, whatever label selected it, with the DaemonSet's image, only after
// the DaemonSet is gone; each node's exit code is printed and every debug
// pod deleted.
func TestUninstallLoop(t *testing.T) {
	script := uninstallScript(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(fakeKubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECTL_LOG="+log)
	out, err := cmd.CombinedOutput()
	t.Logf("the script's output (%v):\n%s", err, out)
	data, _ := os.ReadFile(log)
	calls := strings.Split(strings.TrimSpace(string(data)), "\n")
	deleted := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "delete -k ") })
	if deleted < 0 {
		t.Fatalf("the DaemonSet is never deleted; calls:\n%s", data)
	}
	for _, node := range []string{"n1", "n2", "n3"} {
		debug := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "debug node/"+node+" ") })
		if debug < deleted {
			t.Errorf("%s: no uninstall after the DaemonSet's deletion (debug at call %d, delete at %d)", node, debug, deleted)
		}
		pod := "node-debugger-" + node + "-x7k2q"
		if !slices.Contains(calls, "delete pod "+pod) {
			t.Errorf("%s: the debug pod %s is not deleted", node, pod)
		}
		exit := "0"
		if node == "n2" {
			exit = "1"
		}
		if !strings.Contains(string(out), node+": exit "+exit+"\n") || !strings.Contains(string(out), "log of "+pod+"\n") {
			t.Errorf("%s: the output does not give the uninstall's log and %q", node, node+": exit "+exit)
		}
	}
}

// uninstallScript is the first shell block of install.md's Uninstall
// section.
func uninstallScript(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Uninstall\n")
	if !ok {
		t.Fatal("install.md has no Uninstall section")
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("install.md's Uninstall section has no shell block")
	}
	script, _, _ := strings.Cut(block, "```")
	return script
}
