package netns

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// lookupProbe builds ./integration/netns/lookup_probe: the lookup in a
// fresh process that links what the plugin's lookup links, not this test
// binary with its gRPC server and everything else.
func lookupProbe(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "lookup_probe")
	if out, err := testenv.GoCmd("build", "-ldflags", "-s -w", "-o", bin, "./integration/netns/lookup_probe").CombinedOutput(); err != nil {
		b.Fatalf("build lookup_probe: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkPodResourcesLookup measures the pod-resources lookup of ADD,
// each in a fresh process against a local server speaking kubelet's API:
// Get, and List where kubelet does not serve Get, with 0, 100 and 1,000
// pods on the node.
func BenchmarkPodResourcesLookup(b *testing.B) {
	testenv.Privileged(b)
	probe := lookupProbe(b)
	n := benchSamples(60) * 2 / 3
	for range b.N {
		for _, c := range []struct {
			pods    int
			listing bool
		}{{0, false}, {100, false}, {1000, false}, {100, true}, {1000, true}} {
			sock, pod := lookupServer(b, c.pods, c.listing)
			var v, cpu []float64
			for range n {
				us, cpuUS, err := lookupOnce(probe, sock, pod, c.pods > 0)
				if err != nil {
					b.Fatal(err)
				}
				v, cpu = append(v, us/1000), append(cpu, cpuUS/1000)
			}
			verb := "Get"
			if c.listing {
				verb = "List (Get off)"
			}
			report(b, row{measure: fmt.Sprintf("pod-resources lookup, %s, %d pods", verb, c.pods), unit: "ms", v: v,
				maxAbs: 1.0, target: "<= 1 ms", remark: fmt.Sprintf("fresh process (lookup_probe); its CPU: median %.2f ms, p95 %.2f ms",
					quantile(cpu, 0.5), quantile(cpu, 0.95))})
		}
	}
}

// lookupServer serves pods pods, the one in the middle allocated rdma/hca, and
// returns the socket and the name to look up.
func lookupServer(b *testing.B, pods int, listing bool) (string, string) {
	b.Helper()
	var list []fakekubelet.Pod
	for i := range pods {
		p := fakekubelet.Pod{Namespace: "default", Name: fmt.Sprintf("pod-%d", i),
			Resources: map[string][]string{"example.com/gpu": {strconv.Itoa(i)}}}
		if i == pods/2 {
			p.Resources["rdma/hca"] = []string{"mlx5_0"}
		}
		list = append(list, p)
	}
	sock := filepath.Join(b.TempDir(), "kubelet.sock")
	s, err := fakekubelet.StartWith(sock, list, fakekubelet.Options{GetDisabled: listing})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	return sock, fmt.Sprintf("pod-%d", pods/2)
}

// lookupOnce returns the wall and CPU microseconds of one lookup in a child.
func lookupOnce(probe, sock, pod string, found bool) (us, cpuUS float64, err error) {
	cmd := exec.Command(probe, sock, "default", pod, "rdma/hca")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("lookup child: %w: %s", err, out)
	}
	var allocs int
	if _, err := fmt.Sscan(string(out), &us, &cpuUS, &allocs); err != nil {
		return 0, 0, fmt.Errorf("lookup child printed %q: %w", out, err)
	}
	if (allocs == 1) != found {
		return 0, 0, fmt.Errorf("lookup of %s found %d allocations, want found=%v", pod, allocs, found)
	}
	return us, cpuUS, nil
}
