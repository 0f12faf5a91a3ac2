package crash

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

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

// installPlugin puts the failpoint build as rdma-chain in dir, beside the
// reference plugins of the guest's CNI_PATH.
func installPlugin(dir, build, refDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(build)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, guestkit.PluginName), b, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		dst := filepath.Join(dir, p)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(refDir, p), dst); err != nil {
			return err
		}
	}
	return nil
}
