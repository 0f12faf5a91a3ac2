package chain

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
)

// TestSharedDelUnpinnedNetns: DEL of a pod whose netns pin is gone while
// the test still holds the netns (as a leaked process would) deletes its
// child from the host netns through the recorded nsid and ifindex, and
// only then releases the lease; a netns that really died is released as
// before; a look-up the kernel refuses (no CAP_NET_ADMIN) fails with 11,
// keeping the child, the lease and the record, and the next DEL finishes.
func TestSharedDelUnpinnedNetns(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name    string
		dies    bool // the netns dies with its pin
		refused bool // the first DEL's look-up runs without CAP_NET_ADMIN
	}{
		{name: "netns held"},
		{name: "netns died", dies: true},
		{name: "look-up refused", refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, conf, leases := ipamNode(t, false)
			pod := netnstest.NewNS(t)
			if err := n.run(add, pod, conf, prevResult100); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if _, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || leaseCount(t, leases) != 1 {
				t.Fatalf("ADD made no child or no lease")
			}
			if rec := readFile(t, stateFiles(t, n.dir)[0]); !strings.Contains(rec, `"podNetnsId":`) {
				t.Errorf("record without the child's nsid: %s", rec)
			}
			if err := netnstest.Unpin(pod.Path()); err != nil {
				t.Fatal(err)
			}
			if tt.dies {
				_ = pod.Close()
			}
			ipam := &childFirst{t: t, pod: pod, held: !tt.dies}
			n.wrap = func(p *Plugin) {
				ipam.IPAM = p.env.IPAM
				p.env.IPAM = ipam
				if tt.refused {
					p.env.Links = noNetAdmin{p.env.Links}
				}
			}
			if tt.refused {
				wantCode(t, n.run(del, pod, conf, ""), 11, "may still hold its address")
				if _, ok := netnstest.Snapshot(t, pod, "rdma0"); !ok || leaseCount(t, leases) != 1 || len(stateFiles(t, n.dir)) != 1 || ipam.dels != 0 {
					t.Fatalf("refused DEL gave back something: child %v, leases %d, records %d", ok, leaseCount(t, leases), len(stateFiles(t, n.dir)))
				}
				tt.refused = false
			}
			for i := range 2 {
				if err := n.run(del, pod, conf, ""); err != nil {
					t.Fatalf("DEL %d: %v", i+1, err)
				}
			}
			if !tt.dies {
				if names := netnstest.Names(t, pod); len(names) != 1 {
					t.Errorf("held netns keeps %v", names)
				}
			}
			if leaseCount(t, leases) != 0 || len(stateFiles(t, n.dir)) != 0 || ipam.dels == 0 {
				t.Errorf("after DEL: leases %d, records %d, IPAM DELs %d", leaseCount(t, leases), len(stateFiles(t, n.dir)), ipam.dels)
			}
			n.assertHostRestored(t)
		})
	}
}

// childFirst is the IPAM, checking at each DEL that a held pod netns has
// no rdma0 any more: the lease goes only after the child.
type childFirst struct {
	addr.IPAM
	t    *testing.T
	pod  ns.NetNS
	held bool
	dels int
}

func (c *childFirst) Del(ctx context.Context, r addr.Request) error {
	c.dels++
	if c.held {
		if _, ok := netnstest.Snapshot(c.t, c.pod, "rdma0"); ok {
			c.t.Error("the IPAM's DEL ran while the pod's child still existed")
		}
	}
	return c.IPAM.Del(ctx, r)
}

// noNetAdmin is Links with DelChild run without CAP_NET_ADMIN.
type noNetAdmin struct{ Links }

func (l noNetAdmin) DelChild(podNSPath, name, expectMAC string, id *netdev.ChildID) error {
	return netnstest.WithoutNetAdmin(func() error { return l.Links.DelChild(podNSPath, name, expectMAC, id) })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
