package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestReplacedNetnsIsGone checks that a record whose netns path now names
// another netns (the pod's netns died and a runtime mounted a new one at
// the same path) is reclaimable to ADD and unhealthy to inspect: both ask
// the record, by inode and cookie. The path alone still names a netns,
// which must not read as healthy.
func TestReplacedNetnsIsGone(t *testing.T) {
	testenv.Privileged(t)
	pod, next := netnstest.NewNS(t), netnstest.NewNS(t)
	path := filepath.Join(t.TempDir(), "pod-netns")
	bind := func(target string) {
		t.Helper()
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(target, path, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}
	bind(pod.Path())
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	id, err := netnsid.Of(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec := &state.Record{Network: "n", ContainerID: "c1", IfName: "eth0", NetNS: path, Mode: rdma.ModeShared,
		NetNSIno: id.Inode, NetNSCookie: id.Cookie, CreatedAt: time.Now()}
	if err := state.New(dir).Put(rec); err != nil {
		t.Fatal(err)
	}
	in := &inspector{k: newKernelReader(), dataDirs: []string{dir}}
	if r := in.inspect(""); len(r.Attachments) != 1 || !r.Attachments[0].Healthy {
		t.Fatalf("the pod's own netns: %+v", r.Attachments)
	}

	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	netnstest.Delete(pod)
	bind(next.Path())
	if gone, err := netnsid.Gone(path); gone || err != nil {
		t.Fatalf("the path alone: gone %v, %v; want a live netns there", gone, err)
	}
	reclaim, err := rec.NetnsGone(chain.KernelEnv().Netns.ID)
	if err != nil || !reclaim {
		t.Errorf("ADD's reclaim: gone %v, %v; want true", reclaim, err)
	}
	r := in.inspect("")
	if len(r.Attachments) != 1 || r.Attachments[0].Healthy ||
		len(r.Attachments[0].Problems) != 1 || !strings.Contains(r.Attachments[0].Problems[0], "netns "+path+" is gone") {
		t.Errorf("inspect after the netns was replaced: %+v", r.Attachments)
	}
}
