//go:build cluster

package cluster

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
)

// TestMain fails the tier when its tests leave a process behind
// (a qemu guest, a control-plane part, a forwarder) after their cleanups.
func TestMain(m *testing.M) { leakcheck.Main(m) }
