package crash

import "github.com/rdma-chain/rdma-chain/integration/vm/guestkit"

// pod is one sandbox the matrix attaches: its netns and the runtime's
// arguments, as containerd passes them.
type pod struct {
	name  string
	netns string
}

// kit is the pod as the shared chain runs it. An SMC-R pod: on a kernel
// with SMC its ADD writes both pnet tables, and their failpoints are in
// the matrix.
func (p pod) kit() guestkit.Pod {
	return guestkit.Pod{Name: p.name, NetNS: p.netns, ContainerID: "crash-" + p.name,
		Caps: map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"network.alibabacloud.com/erdma-smcr": "true"}}}
}
