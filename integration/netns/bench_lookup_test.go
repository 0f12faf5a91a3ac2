//go:build privileged

package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/fakekubelet"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

// lookupEnv makes the test binary a one-shot lookup client: a fresh process,
// like the plugin, asks kubelet once and prints the microseconds it took and
// the number of allocations found.
const lookupEnv = "RC_BENCH_LOOKUP"

func init() {
	spec := os.Getenv(lookupEnv)
	if spec == "" {
		return
	}
	sock, pod, _ := strings.Cut(spec, "|")
	cpu0, start := selfCPU(), time.Now()
	allocs, err := podres.New(sock, 0).Allocated(context.Background(), "default", pod, []string{"rdma/hca"})
	took, cpu := time.Since(start), selfCPU()-cpu0
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(took.Microseconds(), cpu.Microseconds(), len(allocs))
	os.Exit(0)
}

// selfCPU is the CPU time of this process (every thread) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The pod-resources lookup of ADD, each in a fresh process against a local
// server speaking kubelet's API: Get, and List where kubelet does not serve
// Get, with 0, 100 and 1,000 pods on the node.
func BenchmarkPodResourcesLookup(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	n := benchSamples(60) * 2 / 3
	for range b.N {
		for _, c := range []struct {
			pods    int
			listing bool
		}{{0, false}, {100, false}, {1000, false}, {100, true}, {1000, true}} {
			sock, pod := lookupServer(b, c.pods, c.listing)
			var v, cpu []float64
			for range n {
				us, cpuUS, err := lookupOnce(self, sock, pod, c.pods > 0)
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
				maxAbs: 1.0, target: "<= 1 ms", remark: fmt.Sprintf("fresh process; its CPU: median %.2f ms, p95 %.2f ms",
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
func lookupOnce(self, sock, pod string, found bool) (us, cpuUS float64, err error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), lookupEnv+"="+sock+"|"+pod)
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
