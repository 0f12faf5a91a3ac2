package netns

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// BenchmarkPodCycle measures what chaining rdma-chain costs a pod that needs
// no RDMA: one ADD+DEL cycle of [ptp+host-local] alone against
// [ptp+host-local, rdma-chain] through libcni, the real binaries, in one pod
// netns.
func BenchmarkPodCycle(b *testing.B) {
	testenv.Privileged(b)
	for _, chained := range []bool{false, true} {
		b.Run(fmt.Sprintf("rdma-chain=%v", chained), func(b *testing.B) {
			n := newNode(b, "1.0.0", nil)
			n.kubelet()
			if !chained {
				primary := map[string]any{"cniVersion": "1.0.0", "name": netName, "plugins": []any{n.ptpEntry()}}
				raw, _ := json.Marshal(primary)
				n.list, _ = confList(raw)
			}
			p := n.pod("web")
			for b.Loop() {
				if _, err := n.add(p); err != nil {
					b.Fatal(err)
				}
				if err := n.del(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
