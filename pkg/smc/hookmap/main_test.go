package hookmap

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
