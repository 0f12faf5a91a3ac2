package podres

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
)

// TestLookupBurstUnderKubeletRateLimit plays a node that starts many pods
// at once: 200 lookups together against grpc-go serving kubelet's service
// behind kubelet's own rate limit (100 calls a second, burst 10, the rest
// refused with ResourceExhausted). It checks that every lookup gets its
// pod's answer; one in five pods was allocated rdma/hca.
func TestLookupBurstUnderKubeletRateLimit(t *testing.T) {
	const n = 200
	var pods []*prv1.PodResources
	for i := range n {
		p := pod("default", fmt.Sprintf("p%d", i), ctr("c"))
		if i%5 == 0 {
			p = pod("default", fmt.Sprintf("p%d", i), ctr("c", dev("rdma/hca", fmt.Sprintf("mlx5_%d", i))))
		}
		pods = append(pods, p)
	}
	lim := fakekubelet.NewLimiter()
	sock := serve(t, &fakeKubelet{pods: pods}, lim.ServerOption())

	latency := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			got, err := New(sock, 0).Lookup(context.Background(), "default", fmt.Sprintf("p%d", i), Query{ResourceNames: []string{"rdma/hca"}})
			latency[i] = time.Since(t0)
			if err == nil {
				err = checkBurstAnswer(i, got)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()

	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("lookup of p%d: %v", i, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d lookups failed", failed, n)
	}
	slices.Sort(latency)
	t.Logf("%d lookups: latency p50 %v, p90 %v, max %v; kubelet served %d calls and refused %d",
		n, latency[n/2].Round(time.Millisecond), latency[n*9/10].Round(time.Millisecond), latency[n-1].Round(time.Millisecond),
		lim.Served.Load(), lim.Refused.Load())
}

func checkBurstAnswer(i int, got *Pod) error {
	var want []Allocation
	if i%5 == 0 {
		want = []Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{fmt.Sprintf("mlx5_%d", i)}}}
	}
	if !got.Known || len(got.Devices) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.Devices, want)) {
		return fmt.Errorf("got %+v, want known with devices %+v", got, want)
	}
	return nil
}
