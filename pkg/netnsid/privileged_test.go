package netnsid

import (
	"errors"
	"os"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestBindMounts tells two bind-mounted netns apart by inode and cookie,
// and reads a path as gone once its netns was deleted, and once a runtime
// left a plain file there after unmounting it.
func TestBindMounts(t *testing.T) {
	testenv.Privileged(t)
	a, b := netnstest.NewNS(t), netnstest.NewNS(t)
	idA, err := Of(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	idB, err := Of(b.Path())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := Of(a.Path()); again != idA {
		t.Errorf("identity of one netns changed: %+v -> %+v", idA, again)
	}
	if idA.Inode == idB.Inode || idA.Cookie == idB.Cookie || idA.Cookie == 0 {
		t.Errorf("two netns: %+v and %+v; want distinct inodes and cookies", idA, idB)
	}
	if gone, err := Gone(a.Path()); gone || err != nil {
		t.Errorf("Gone of a live netns = %v, %v", gone, err)
	}
	path := a.Path()
	netnstest.Delete(a)
	for _, left := range []string{"nothing", "a plain file"} {
		if left == "a plain file" {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(path)
		}
		if gone, err := Gone(path); !gone || err != nil {
			t.Errorf("Gone of a deleted netns, %s left at its path = %v, %v; want true", left, gone, err)
		}
		if id, err := Of(path); !errors.Is(err, ErrGone) {
			t.Errorf("Of of a deleted netns, %s left at its path = %+v, %v; want ErrGone", left, id, err)
		}
	}
}
