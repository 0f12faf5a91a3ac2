//go:build cluster

package cluster

import (
	"reflect"
	"testing"
)

// TestParseUsage checks the reading of the per-pod usage series and
// when a pod counts as holding RDMA objects.
func TestParseUsage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		text    string
		want    map[string]map[string]float64
		holding map[string]bool
	}{
		{"rping on rxe0", `rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="qp"} 1
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="mr"} 4
rdma_chain_pod_rdma_mr_bytes{device="rxe0",namespace="default",pod="a"} 262144
rdma_chain_pod_rdma_objects{device="simrdma0",namespace="default",pod="a",type="qp"} 0
rdma_chain_pod_rdma_objects{device="simrdma0",namespace="default",pod="b",type="qp"} 0
`, map[string]map[string]float64{"a": {"qp@rxe0": 1, "mr@rxe0": 4, "mr_bytes@rxe0": 262144, "qp@simrdma0": 0}, "b": {"qp@simrdma0": 0}},
			map[string]bool{"a": true, "b": false}},
		{"QP without MR bytes", `rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="qp"} 2
rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="mr"} 1
`, map[string]map[string]float64{"a": {"qp@rxe0": 2, "mr@rxe0": 1}}, map[string]bool{"a": false}},
		{"QP and MR on different devices", `rdma_chain_pod_rdma_objects{device="rxe0",namespace="default",pod="a",type="qp"} 1
rdma_chain_pod_rdma_objects{device="x",namespace="default",pod="a",type="mr"} 1
rdma_chain_pod_rdma_mr_bytes{device="x",namespace="default",pod="a"} 1
`, map[string]map[string]float64{"a": {"qp@rxe0": 1, "mr@x": 1, "mr_bytes@x": 1}}, map[string]bool{"a": false}},
		{"summed, no pod label", `rdma_chain_pod_rdma_objects{device="rxe0",type="qp"} 1
# HELP rdma_chain_pod_rdma_objects x
rdma_chain_pod_rdma_objectsx{device="rxe0",pod="a",type="qp"} 1
`, map[string]map[string]float64{}, map[string]bool{"a": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseUsage(tc.text)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseUsage %v, want %v", got, tc.want)
			}
			for pod, want := range tc.holding {
				if holding(got[pod]) != want {
					t.Errorf("holding(%s) %v, want %v", pod, !want, want)
				}
			}
		})
	}
}
