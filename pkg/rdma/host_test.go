package rdma

import (
	"errors"
	"os"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestHostKernelWithoutRDMA runs against this machine's kernel, only where it
// has no RDMA (no /sys/class/infiniband): every entry point must report
// ErrNoRDMA instead of a raw netlink error.
func TestHostKernelWithoutRDMA(t *testing.T) {
	_, err := os.Stat("/sys/class/infiniband")
	testenv.KernelLacks(t, "RDMA (/sys/class/infiniband)", !os.IsNotExist(err))
	s := New()
	if m, err := s.NetnsMode(); !errors.Is(err, ErrNoRDMA) {
		t.Errorf("NetnsMode() = %q, %v; want ErrNoRDMA", m, err)
	}
	if devs, err := s.Devices(); !errors.Is(err, ErrNoRDMA) {
		t.Errorf("Devices() = %v, %v; want ErrNoRDMA", devs, err)
	}
	if err := s.MoveToNetns("rxe0", 0); !errors.Is(err, ErrNoRDMA) {
		t.Errorf("MoveToNetns() = %v; want ErrNoRDMA", err)
	}
	t.Logf("NetnsMode error here: %v", func() error { _, err := s.NetnsMode(); return err }())
}
