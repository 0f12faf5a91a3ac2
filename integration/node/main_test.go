package node

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
)

// TestMain fails the tier when its tests leave a process behind
// (its qemu guest) after their cleanups.
func TestMain(m *testing.M) { leakcheck.Main(m) }
