package chain

import (
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestSMCHookKeyOfReusedInodeKernel checks, on the kernel's netns, that
// when a pod's netns dies without a DEL and the kernel gives its inode
// number to the next netns, an SMC-R pod's, the old pod's DEL leaves the
// number listed in the socket hook (the fake's map; the netns identities
// are the kernel's).
func TestSMCHookKeyOfReusedInodeKernel(t *testing.T) {
	n := newNode(t, rdma.ModeShared)
	n.w.boot(t, bootA)
	conf := annotated("true") + `,"smcr":{"transparent":"bpf","onUnsupported":"fail"}`
	old := netnstest.NewNS(t)
	if err := n.run(add, old, conf, prevResult100); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	oldID := "ctr-" + old.Path()[len(old.Path())-8:]
	rec, err := state.New(n.dir).Get(state.Key{Network: "rdmanet", ContainerID: oldID, IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if !n.w.hooked[rec.NetNSIno] {
		t.Fatalf("ADD did not list inode %d: %v", rec.NetNSIno, n.w.hooked)
	}
	oldPath := old.Path()
	netnstest.Delete(old)
	reused := netnsWithInode(t, rec.NetNSIno)
	t.Logf("netns %s got inode %d of the dead %s", reused.Path(), rec.NetNSIno, oldPath)
	if err := n.run(add, reused, conf, prevResult100); err != nil {
		t.Fatalf("ADD of the pod that got the inode: %v", err)
	}

	args := cmd(n.dir, conf, "")
	args.ContainerID, args.Netns = oldID, oldPath
	if err := n.host.Do(func(ns.NetNS) error { return n.plugin().Del(args) }); err != nil {
		t.Fatalf("DEL of the dead pod: %v", err)
	}
	if !n.w.hooked[rec.NetNSIno] {
		t.Fatalf("the dead pod's DEL unlisted inode %d, the live SMC-R pod's", rec.NetNSIno)
	}
	if err := n.run(check, reused, conf, n.w.stdout.String()); err != nil {
		t.Errorf("CHECK of the pod that got the inode: %v", err)
	}
	if err := n.run(del, reused, conf, ""); err != nil {
		t.Fatal(err)
	}
	if len(n.w.hooked) != 0 {
		t.Errorf("the last DEL left %v listed", n.w.hooked)
	}
}

// netnsWithInode makes netns until the kernel gives one inode ino (it
// gives the lowest free number, once the dead netns's cleanup freed it);
// the others stay until the test ends, holding the numbers below.
func netnsWithInode(t *testing.T, ino uint64) ns.NetNS {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for tries := 0; time.Now().Before(deadline); tries++ {
		n := netnstest.NewNS(t)
		id, err := netnsid.Of(n.Path())
		if err != nil {
			t.Fatal(err)
		}
		if id.Inode == ino {
			t.Logf("inode %d given again after %d other netns", ino, tries)
			return n
		}
		if id.Inode > ino {
			// Above it: its number is still held (cleanup pending) or taken.
			netnstest.Delete(n)
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Fatalf("the kernel gave inode %d to no new netns within 20 s", ino)
	return nil
}
