package rdma

import (
	"os"
	"syscall"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// nsInode returns the inode of the netns at path.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestInNetnsRunsInsideTarget checks that the kernel's Netns.Enter runs fn on
// a thread whose netns is the target (the kernel checks RDMA device moves
// against the calling thread's netns), and the caller's thread is back
// afterwards.
func TestInNetnsRunsInsideTarget(t *testing.T) {
	testenv.Privileged(t)
	pod := netnstest.NewNS(t)
	want := nsInode(t, pod.Path())
	host := nsInode(t, "/proc/self/ns/net")
	var got uint64
	err := kernelNetns{}.Enter(pod.Path(), func(n Netlink) error {
		if _, ok := n.(kernelNL); !ok {
			t.Errorf("fn got %T; want the kernel's netlink of the entered thread", n)
		}
		got = nsInode(t, "/proc/thread-self/ns/net")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got == host {
		t.Fatalf("fn ran in netns inode %d; want the pod's %d (host %d)", got, want, host)
	}
}

// TestReturnToHostRealNetnsWithoutRDMA checks that on a kernel without
// RDMA (this machine) ReturnToHost enters a live pod netns and finds
// nothing to do.
func TestReturnToHostRealNetnsWithoutRDMA(t *testing.T) {
	testenv.Privileged(t)
	_, err := os.Stat("/sys/class/infiniband")
	testenv.KernelLacks(t, "RDMA (/sys/class/infiniband)", !os.IsNotExist(err))
	pod := netnstest.NewNS(t)
	host, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := New().ReturnToHost("simrdma0", pod.Path(), int(host.Fd())); err != nil {
		t.Fatalf("ReturnToHost = %v; want nil without RDMA", err)
	}
	if found, err := New().InNetns("simrdma0", pod.Path()); found || err == nil {
		t.Fatalf("InNetns = %v, %v; want false and the no-RDMA error", found, err)
	}
}
