//go:build node

// Package node is the node tier: a Kubernetes node in a VM (Debian 6.12, or
// 6.1 with NODE_KERNEL=6.1, under qemu TCG) with real parts only, kubelet
// v1.37 standalone, containerd 2.4.2 and runc, the Mellanox RDMA shared
// device plugin, rdma-chain deployed by a static pod derived from
// conf/daemonset.yaml on the image make image builds, and pod manifests as
// users write them (integration/node/pods, or RC_NODE_PODS), each checked
// against its annotation test.rdma-chain/expect; one boot per RDMA netns
// mode (the pods' shared/ and exclusive/ folders).
// scripts/node/run.sh builds and boots the guest; this test runs it and
// reads the console's markers.
package node

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

func TestNode(t *testing.T) {
	testenv.RequireRoot(t)
	root := testenv.RepoRoot()
	for _, f := range []string{".cache/vm/env", ".cache/node/parts.env", "bin/rdma-chain-image.tar"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			testenv.Unavailable(t, "%s missing (make test-node prepares it): %v", f, err)
		}
	}
	args := []string{filepath.Join(root, "scripts/node/run.sh")}
	if pods := os.Getenv("RC_NODE_PODS"); pods != "" {
		args = append(args, pods)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = root
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := read(t, out)
	runErr := cmd.Wait()
	for _, f := range res.fails {
		t.Errorf("%s", f)
	}
	if !res.pass {
		t.Errorf("no RC-RESULT pass from the guest (run.sh: %v)", runErr)
	} else if runErr != nil {
		// One boot passed; run.sh fails unless every boot did (a boot that
		// timed out or died prints neither RC-RESULT nor RC-FAIL).
		t.Errorf("run.sh: %v: a boot did not pass", runErr)
	}
	if res.passes == 0 {
		t.Error("no check passed")
	}
	t.Logf("%d checks passed; %s", res.passes, res.kubelet)
	for _, l := range res.times {
		t.Log(l)
	}
	if f := smcrShare(res.times); f != "" {
		t.Log(f)
	}
}

type result struct {
	pass    bool
	passes  int
	fails   []string
	times   []string
	kubelet string
}

// read echoes run.sh's output to the test log and collects the markers:
// the boots' consoles, each whole once both boots are done (meanwhile in
// .cache/node/run/console-MODE.log).
func read(t *testing.T, r io.Reader) result {
	var res result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		t.Log(l)
		switch {
		case strings.HasPrefix(l, "RC-RESULT pass"):
			res.pass = true
		case strings.HasPrefix(l, "RC-PASS "):
			res.passes++
		case strings.HasPrefix(l, "RC-FAIL "):
			res.fails = append(res.fails, l)
		case strings.HasPrefix(l, "NODE-TIME "), strings.HasPrefix(l, "NODE-PLUGIN "), strings.HasPrefix(l, "NODE-NETREADY "):
			res.times = append(res.times, l)
		case strings.HasPrefix(l, "RC-INFO Kubernetes v"):
			res.kubelet = "kubelet " + strings.TrimPrefix(l, "RC-INFO ")
		}
	}
	return res
}
