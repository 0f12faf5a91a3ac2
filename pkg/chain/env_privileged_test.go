//go:build privileged

package chain

import (
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testenv"
)

// The netns cookie tells netns apart where inode numbers may repeat: stable
// for one netns, different for another; a missing path is an error.
func TestNetnsCookie(t *testing.T) {
	testenv.RequireRoot(t)
	a, b := netnstest.NewNS(t), netnstest.NewNS(t)
	ca, err := netnsCookie(a.Path())
	if err != nil || ca == 0 {
		t.Fatalf("cookie %d, %v", ca, err)
	}
	if again, _ := netnsCookie(a.Path()); again != ca {
		t.Errorf("cookie of one netns changed: %d -> %d", ca, again)
	}
	if cb, _ := netnsCookie(b.Path()); cb == ca {
		t.Errorf("two netns share cookie %d", ca)
	}
	if _, err := netnsCookie(a.Path() + "-missing"); err == nil {
		t.Error("cookie of a missing netns")
	}
	if ino, alive, err := netnsInode(a.Path()); err != nil || !alive || ino == 0 {
		t.Errorf("netnsInode = %d %v %v", ino, alive, err)
	}
}
