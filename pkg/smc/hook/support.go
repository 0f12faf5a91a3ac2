package hook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// ipprotoSMC is IPPROTO_SMC (Linux >= 6.11).
const ipprotoSMC = 256

// What a kernel may lack for the hook; Supported wraps one of them.
var (
	ErrNoBTF        = errors.New("no kernel BTF (/sys/kernel/btf/vmlinux)")
	ErrNoHook       = errors.New("no update_socket_protocol hook (Linux >= 6.6)")
	ErrNoBPFFS      = hookmap.ErrNoBPFFS
	ErrNoIPPROTOSMC = errors.New("no IPPROTO_SMC (Linux >= 6.11 with smc loaded)")
)

// Supported tells whether this kernel can run the hook with pins under
// DefaultDir: it checks, in this order, kernel BTF, the hook function, a
// bpffs at the pin directory's parent and IPPROTO_SMC.
func Supported() error { return Hook{}.Supported() }

// Supported is the package Supported for h's pin directory.
func (h Hook) Supported() error {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	var fn *btf.Func
	if err := spec.TypeByName("update_socket_protocol", &fn); err != nil {
		return fmt.Errorf("%w: %w", ErrNoHook, err)
	}
	var fs unix.Statfs_t
	parent := filepath.Dir(h.dir())
	if err := unix.Statfs(parent, &fs); err != nil || fs.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w at %s", ErrNoBPFFS, parent)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, ipprotoSMC)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoIPPROTOSMC, err)
	}
	unix.Close(fd)
	return nil
}
