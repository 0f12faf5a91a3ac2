package netns

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// cycleNode is a node netns where cnitool runs two conflists:
// [ptp+host-local, rdma-chain] and [ptp+host-local, tuning].
type cycleNode struct {
	dir, binDir, tool string
	node              ns.NetNS
}

func newCycleNode(b *testing.B) *cycleNode {
	b.Helper()
	c := &cycleNode{dir: b.TempDir()}
	c.binDir = filepath.Join(c.dir, "bin")
	mkdirs(b, c.binDir)
	link(b, pluginBin(b), filepath.Join(c.binDir, "rdma-chain"))
	for _, p := range []string{"ptp", "host-local", "loopback", "tuning"} {
		link(b, upstream(b, p), filepath.Join(c.binDir, p))
	}
	c.tool = testenv.RequireBinary(b, "cnitool", testenv.ToolsDir("bin"))
	c.node = netnstest.NewNS(b)
	sock := filepath.Join(c.dir, "kubelet.sock")
	s, err := fakekubelet.Start(sock, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	for i, second := range []map[string]any{
		{"type": "rdma-chain", "dataDir": filepath.Join(c.dir, "rc"), "podResourcesSocket": sock},
		{"type": "tuning", "dataDir": filepath.Join(c.dir, "tuning")},
	} {
		ptp := map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{"type": "host-local",
			"dataDir": filepath.Join(c.dir, "ipam", second["type"].(string)),
			"ranges":  [][]map[string]string{{{"subnet": fmt.Sprintf("10.%d.0.0/16", 78+i)}}}}}
		list, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": second["type"],
			"plugins": []any{ptp, second}})
		conf := filepath.Join(c.dir, "net.d", second["type"].(string))
		mkdirs(b, conf)
		if err := os.WriteFile(filepath.Join(conf, "10.conflist"), list, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// cycle is what a runtime does for one pod with net's chain, as processes:
// ip netns add, cnitool add, cnitool del, ip netns del.
func (c *cycleNode) cycle(net string, i int) (sample, error) {
	pod := fmt.Sprintf("rcbench-%d-%d", os.Getpid(), i)
	env := append(os.Environ(), "NETCONFPATH="+filepath.Join(c.dir, "net.d", net), "CNI_PATH="+c.binDir,
		"CNI_CACHE_DIR="+filepath.Join(c.dir, "cache"), "CNI_CONTAINERID="+pod,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="+pod+";K8S_POD_UID=uid-"+pod)
	nodeName := filepath.Base(c.node.Path())
	steps := [][]string{
		{"ip", "netns", "add", pod},
		{"ip", "netns", "exec", nodeName, c.tool, "add", net, "/run/netns/" + pod},
		{"ip", "netns", "exec", nodeName, c.tool, "del", net, "/run/netns/" + pod},
		{"ip", "netns", "del", pod},
	}
	cpu0, start := childrenCPU(), time.Now()
	for _, st := range steps {
		cmd := exec.Command(st[0], st[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = exec.Command("ip", "netns", "del", pod).Run()
			return sample{}, fmt.Errorf("%v: %w: %s", st, err, out)
		}
	}
	return sample{wall: time.Since(start), cpu: childrenCPU() - cpu0}, nil
}

// BenchmarkPodCycleCnitool measures a pod's whole network cycle through
// cnitool with rdma-chain passing the pod through, against the same with
// upstream tuning in its place.
func BenchmarkPodCycleCnitool(b *testing.B) {
	testenv.Privileged(b)
	c := newCycleNode(b)
	n := benchSamples(60) / 2
	for range b.N {
		i := 0
		run := func(net string) func() (sample, error) {
			return func() (sample, error) { i++; return c.cycle(net, i) }
		}
		rc, tu := paired(b, n, run("rdma-chain"), run("tuning"))
		report(b, row{measure: "pod cycle CPU via cnitool, [ptp, rdma-chain]", unit: "ms", v: ms(rc, cpuMS),
			baseName: "[ptp, tuning]", base: ms(tu, cpuMS), maxRatio: 0.9, target: "<= 0.9x",
			remark: "netns add, ADD, DEL, netns del"})
		report(b, row{measure: "pod cycle wall via cnitool, [ptp, rdma-chain]", unit: "ms", v: ms(rc, wallMS),
			baseName: "[ptp, tuning]", base: ms(tu, wallMS), maxRatio: 0.9, target: "<= 0.9x"})
	}
}

// BenchmarkConcurrentPassThrough measures throughput and cycle latency
// under contention: 16 runtimes' workers at once, each running 100
// pass-through ADD+DEL of rdma-chain on its own container.
func BenchmarkConcurrentPassThrough(b *testing.B) {
	testenv.Privileged(b)
	rc := pluginBin(b)
	p := newBenchPod(b)
	const workers = 16
	cycles := benchSamples(60) * 100 / 60
	for range b.N {
		var mu sync.Mutex
		var lat []float64
		var failed int
		var firstErr error
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				id := fmt.Sprintf("bench-%d", w)
				for range cycles {
					t0 := time.Now()
					_, err := runProc(cniCmd(rc, "ADD", p.conf("rdma-chain", true), p.env(id)...))
					if err == nil {
						_, err = runProc(cniCmd(rc, "DEL", p.conf("rdma-chain", true), p.env(id)...))
					}
					mu.Lock()
					lat = append(lat, float64(time.Since(t0))/1e6)
					if err != nil {
						failed++
						if firstErr == nil {
							firstErr = err
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		// A failed cycle (a kubelet lookup past its 2 s bound under this
		// load) is counted in the row, not hidden and not fatal.
		if firstErr != nil {
			b.Logf("%d of %d cycles failed; first: %v", failed, len(lat), firstErr)
		}
		label := fmt.Sprintf("%d workers x %d pass-through ADD+DEL", workers, cycles)
		report(b, row{measure: label + ", cycle latency", unit: "ms", v: lat, target: "no failed cycle",
			failed: &failed, remark: fmt.Sprintf("throughput %.1f cycles/s on %d CPUs; %d failed",
				float64(len(lat)-failed)/took.Seconds(), nprocs(), failed)})
	}
}

func nprocs() int {
	out, err := exec.Command("nproc").Output()
	var n int
	if err == nil {
		_, _ = fmt.Sscan(string(out), &n)
	}
	return n
}
