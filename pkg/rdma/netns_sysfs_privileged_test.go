package rdma

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestNetnsSysfs: the sysfs mounted from inside a pod netns shows that
// netns's netdevs, and the host's mounts and /sys are untouched.
func TestNetnsSysfs(t *testing.T) {
	testenv.Privileged(t)
	node := netnstest.NewNS(t)
	peer := netnstest.NewNS(t)
	netnstest.AddVeth(t, node, peer, "rdmaeth", 1500)
	before, err := ownMounts()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	err = inNetnsSysfs(node.Path(), func(sys string) error {
		entries, err := os.ReadDir(filepath.Join(sys, "class", "net"))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"lo", "rdmaeth"}; !slices.Equal(names, want) {
		t.Errorf("netdevs in the node netns's sysfs: %v, want %v", names, want)
	}
	after, _ := ownMounts()
	if before != after {
		t.Errorf("the process's mounts changed:\n%s\n---\n%s", before, after)
	}
	if _, err := os.Stat("/sys/class/net/rdmaeth"); err == nil {
		t.Error("the host's /sys shows the node netns's netdev")
	}
	// This kernel has no RDMA: the GID read says so.
	if _, err := GIDsIn(node.Path()); err == nil || !strings.Contains(err.Error(), "infiniband") {
		t.Errorf("GIDsIn without RDMA: %v", err)
	}
}

// ownMounts is this process's mount table without the netns bind mounts
// under /run/netns, which the tests of other packages, run at the same
// time, add and remove in the shared mount there.
func ownMounts() (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	var kept []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/run/netns/") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n"), err
}
