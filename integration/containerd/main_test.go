//go:build containerd

package containerd

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
)

// TestMain checks the host whenever the tier runs as root: the runtimes it
// starts make netns pins, links and mounts without RC_PRIVILEGED.
func TestMain(m *testing.M) { leakcheck.MainHost(m) }
