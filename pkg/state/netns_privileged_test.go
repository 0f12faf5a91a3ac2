//go:build privileged

package state

import (
	"os"
	"syscall"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testenv"
)

// TestNetnsInodeBindMounts tells two bind-mounted netns apart, and a path
// recreated after its netns was removed from the original.
func TestNetnsInodeBindMounts(t *testing.T) {
	testenv.RequireRoot(t)
	a, b := netnstest.NewNS(t), netnstest.NewNS(t)
	inoA, err := NetnsInode(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	inoB, err := NetnsInode(b.Path())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	if inoA != fi.Sys().(*syscall.Stat_t).Ino || inoA == inoB {
		t.Errorf("inodes %d and %d (stat %d): want distinct, matching stat", inoA, inoB, fi.Sys().(*syscall.Stat_t).Ino)
	}
	path := a.Path()
	netnstest.Delete(a)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	if ino, err := NetnsInode(path); err == nil {
		t.Errorf("NetnsInode of a file recreated at %s = %d, want an error", path, ino)
	}
}
