package rdma

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestNetnsSysfs checks that the sysfs mounted from inside a pod netns
// shows that netns's netdevs, and the host's mounts and /sys are
// untouched.
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

// TestNetnsSysfsThreadBack checks that the thread that read a pod netns's
// sysfs is back in its own netns and mount namespace afterwards. The
// runtime keeps the main thread when its locked goroutine ends; one left
// in the pod's namespaces would keep that netns alive after the pod is
// gone (its sysfs mount holds it), so a moved NIC would never come back.
// Run here on a locked thread the test owns, to read its namespaces
// after.
func TestNetnsSysfsThreadBack(t *testing.T) {
	testenv.Privileged(t)
	pod := netnstest.NewNS(t)
	type nsIDs struct{ net, mnt string }
	read := func() (nsIDs, error) {
		n, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			return nsIDs{}, err
		}
		m, err := os.Readlink("/proc/thread-self/ns/mnt")
		return nsIDs{n, m}, err
	}
	type result struct {
		before, inside, after nsIDs
		err                   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // ended with its goroutine: it may be anywhere
		var r result
		if r.before, r.err = read(); r.err == nil {
			r.err = enterNetnsSysfs(pod.Path(), func(string) (err error) {
				r.inside, err = read()
				return err
			})
		}
		if r.err == nil {
			r.after, r.err = read()
		}
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.inside.net == r.before.net || r.inside.mnt == r.before.mnt {
		t.Fatalf("fn ran in the thread's own namespaces: before %+v, inside %+v", r.before, r.inside)
	}
	if r.after != r.before {
		t.Errorf("the thread stayed in %+v, it was in %+v (fn ran in %+v)", r.after, r.before, r.inside)
	}
}
