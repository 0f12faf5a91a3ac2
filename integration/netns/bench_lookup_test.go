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
	start := time.Now()
	allocs, err := podres.New(sock, 0).Allocated(context.Background(), "default", pod, []string{"rdma/hca"})
	took := time.Since(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(took.Microseconds(), len(allocs))
	os.Exit(0)
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
			var v []float64
			for range n {
				us, err := lookupOnce(self, sock, pod, c.pods > 0)
				if err != nil {
					b.Fatal(err)
				}
				v = append(v, us/1000)
			}
			verb := "Get"
			if c.listing {
				verb = "List (Get off)"
			}
			report(b, row{measure: fmt.Sprintf("pod-resources lookup, %s, %d pods", verb, c.pods), unit: "ms", v: v,
				maxAbs: 1.0, target: "<= 1 ms", remark: "fresh process, in-process timer"})
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

func lookupOnce(self, sock, pod string, found bool) (float64, error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), lookupEnv+"="+sock+"|"+pod)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("lookup child: %w: %s", err, out)
	}
	var us float64
	var allocs int
	if _, err := fmt.Sscan(string(out), &us, &allocs); err != nil {
		return 0, fmt.Errorf("lookup child printed %q: %w", out, err)
	}
	if (allocs == 1) != found {
		return 0, fmt.Errorf("lookup of %s found %d allocations, want found=%v", pod, allocs, found)
	}
	return us, nil
}
