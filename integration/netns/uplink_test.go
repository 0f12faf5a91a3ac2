package netns

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestExclusiveUplinkRefusedByTheBinary checks that the built plugin
// (rdma-chain over the fake RDMA subsystem, every netdev real), chained
// after ptp + host-local in exclusive mode, never moves the node's ens9
// while a main-table default route of the node netns goes out through it:
// ADD is refused with 110 naming ens9 and the route, ens9 keeps its
// addresses and routes, no RDMA device moves, no record stays, and the
// chain's DEL succeeds. A default route only in ens9's per-NIC table (the
// setup's) moves it as before.
func TestExclusiveUplinkRefusedByTheBinary(t *testing.T) {
	testenv.Privileged(t)
	bin := fakeRDMAPlugin(t)
	for _, tc := range []struct{ name, dst, gw, words string }{
		{"IPv4 default route", "0.0.0.0/0", "192.0.2.1", "the node's IPv4 default route"},
		{"IPv6 default route", "::/0", "fd00:1::1", "the node's IPv6 default route"},
		{"per-NIC table only", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCrashNode(t, bin, crashScenario{mode: "exclusive"})
			if tc.dst != "" {
				netnstest.AddRoute(t, n.node, "ens9", tc.dst, tc.gw, 0, 0)
			}
			before, _ := netnstest.Snapshot(t, n.node, "ens9")
			p := n.newPod("web")
			r := n.execPlugin("ADD", p, n.primaryAdd(p))
			if tc.words == "" {
				if r.err != nil {
					t.Fatalf("ADD: %v", r)
				}
			} else {
				var e struct {
					Code uint   `json:"code"`
					Msg  string `json:"msg"`
				}
				if r.err == nil || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != 110 ||
					!strings.Contains(e.Msg, "netdev ens9 of RDMA device mlx5_0 carries "+tc.words) {
					t.Fatalf("ADD = %v, want error 110 naming ens9 and %s", r, tc.words)
				}
				if got, ok := netnstest.Snapshot(t, n.node, "ens9"); !ok || !reflect.DeepEqual(got, before) {
					t.Errorf("ens9 = %+v (present %v), want %+v", got, ok, before)
				}
				if moved, _ := os.ReadDir(filepath.Join(n.fakeDir, "moved")); len(moved) != 0 {
					t.Errorf("RDMA devices moved: %v", moved)
				}
				if recs, _ := filepath.Glob(filepath.Join(n.dataDir, "attachments", "*.json")); len(recs) != 0 {
					t.Errorf("records left: %v", recs)
				}
			}
			if err := n.fullDel(p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got, ok := netnstest.Snapshot(t, n.node, "ens9"); !ok || !reflect.DeepEqual(got, before) {
				t.Errorf("after DEL ens9 = %+v (present %v), want %+v", got, ok, before)
			}
		})
	}
}
