package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

var versions = []string{"0.4.0", "1.0.0"}

// TestPassThroughChain checks that a pod kubelet allocated no RDMA resource
// to passes through: the chain's result is the primary's, the pod has only
// what ptp gave it, CHECK passes, DEL works twice and after the netns
// vanished, and no state is written.
func TestPassThroughChain(t *testing.T) {
	testenv.Privileged(t)
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, v, nil)
			n.kubelet(fakekubelet.Pod{Namespace: "default", Name: "other", Resources: map[string][]string{"rdma/hca": {"1"}}})
			p := n.pod("web")
			res, err := n.add(p)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			assertOnlyPrimary(t, res, p)
			if err := n.check(p); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			for i := 0; i < 2; i++ {
				if err := n.del(p); err != nil {
					t.Fatalf("DEL %d: %v", i, err)
				}
			}
			if f := n.stateFiles(); len(f) != 0 {
				t.Errorf("pass-through wrote state %v", f)
			}
		})
	}
}

// TestPassThroughEqualsPrimary checks that the plugin's output for a
// given prevResult is that prevResult, byte for byte in meaning, at the
// conf's version (the real ptp result as input).
func TestPassThroughEqualsPrimary(t *testing.T) {
	testenv.Privileged(t)
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, v, nil)
			n.kubelet()
			p := n.pod("web")
			primary := map[string]any{"cniVersion": v, "name": netName, "plugins": []any{n.ptpEntry()}}
			b, _ := json.Marshal(primary)
			n.list, _ = confList(b)
			prev, err := n.add(p)
			if err != nil {
				t.Fatalf("ptp ADD: %v", err)
			}
			prevJSON, _ := json.Marshal(prev)
			conf := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"rdma-chain","dataDir":%q,"podResourcesSocket":%q,"prevResult":%s}`,
				v, netName, n.dataDir, n.socket, prevJSON)
			out, err := invoke.ExecPluginWithResult(context.Background(), filepath.Join(n.binDir, "rdma-chain"), []byte(conf),
				&invoke.Args{Command: "ADD", ContainerID: p.rt.ContainerID, NetNS: p.rt.NetNS, IfName: "eth0",
					PluginArgsStr: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web", Path: n.binDir}, nil)
			if err != nil {
				t.Fatalf("rdma-chain ADD: %v", err)
			}
			outJSON, _ := json.Marshal(out)
			assertJSONEqual(t, outJSON, prevJSON)
		})
	}
}

// TestNeedsRDMAWithoutKernelSupport checks that a pod that needs RDMA on a
// kernel without RDMA gets code 100 and the node keeps no state; the
// runtime's DEL then cleans the primary's part.
func TestNeedsRDMAWithoutKernelSupport(t *testing.T) {
	testenv.Privileged(t)
	cases := []struct {
		name string
		rc   map[string]any
		pods []fakekubelet.Pod
	}{
		{"podSelection all", map[string]any{"podSelection": "all"}, nil},
		{"allocated rdma/hca", nil, []fakekubelet.Pod{{Namespace: "default", Name: "web", Resources: map[string][]string{"rdma/hca": {"3"}}}}},
		{"conf deviceID", map[string]any{"deviceID": "mlx5_0"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "1.0.0", tc.rc)
			n.kubelet(tc.pods...)
			p := n.pod("web")
			_, err := n.add(p)
			wantCode(t, err, 100, "no RDMA subsystem")
			if f := n.stateFiles(); len(f) != 0 {
				t.Errorf("failed ADD left state %v", f)
			}
			if err := n.del(p); err != nil {
				t.Fatalf("DEL after failed ADD: %v", err)
			}
		})
	}
}

func TestKubeletUnreachable(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, "1.0.0", nil)
	p := n.pod("web")
	_, err := n.add(p)
	wantCode(t, err, types.ErrTryAgainLater, n.socket)
	// Nothing but the outcome log, which keeps the failure for inspect.
	entries, _ := os.ReadDir(n.dataDir)
	for _, e := range entries {
		if e.Name() != outcome.FileName && e.Name() != "lock" {
			t.Errorf("ADD with kubelet down left %s in the state dir", e.Name())
		}
	}
	got, err := outcome.Read(n.dataDir)
	if err != nil || len(got) != 1 || got[0].Code != types.ErrTryAgainLater || got[0].Verb != "ADD" {
		t.Errorf("outcome log %+v, %v; want the ADD failing with 11", got, err)
	}
}

func TestDelVanishedNetns(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, "1.0.0", nil)
	n.kubelet()
	p := n.pod("web")
	if _, err := n.add(p); err != nil {
		t.Fatal(err)
	}
	if err := p.ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.Unpin(p.ns.Path()); err != nil {
		t.Fatal(err)
	}
	if err := n.del(p); err != nil {
		t.Fatalf("DEL of vanished netns: %v", err)
	}
	p.rt.NetNS = ""
	if err := n.del(p); err != nil {
		t.Fatalf("DEL with empty CNI_NETNS: %v", err)
	}
}

// TestKubeletUnreachablePassThrough checks that with kubeletUnreachable
// passThrough and no kubelet at the socket, a pod gets the primary's
// result and nothing else, DEL works, and STATUS keeps the node ready.
func TestKubeletUnreachablePassThrough(t *testing.T) {
	testenv.Privileged(t)
	for _, v := range []string{"1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, v, map[string]any{"kubeletUnreachable": "passThrough"})
			p := n.pod("web")
			res, err := n.add(p)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			assertOnlyPrimary(t, res, p)
			if f := n.stateFiles(); len(f) != 0 {
				t.Errorf("pass-through wrote state %v", f)
			}
			if err := n.del(p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if v == "1.1.0" {
				if err := n.status(); err != nil {
					t.Fatalf("STATUS with passThrough and no kubelet: %v", err)
				}
			}
		})
	}
}

// TestDrainPassesThrough checks that a draining entry (what uninstall
// sets) passes a pod allocated rdma/hca through: without drain the same
// pod gets 100 here (no RDMA subsystem).
func TestDrainPassesThrough(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, "1.1.0", map[string]any{"drain": true})
	n.kubelet(fakekubelet.Pod{Namespace: "default", Name: "web", Resources: map[string][]string{"rdma/hca": {"3"}}})
	p := n.pod("web")
	res, err := n.add(p)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	assertOnlyPrimary(t, res, p)
	if f := n.stateFiles(); len(f) != 0 {
		t.Errorf("draining ADD wrote state %v", f)
	}
	if err := n.del(p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

func TestStatus(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, "1.1.0", nil)
	wantCode(t, n.status(), 50, n.socket)
	n.kubelet()
	if err := n.status(); err != nil {
		t.Fatalf("STATUS with kubelet: %v", err)
	}
	all := newNode(t, "1.1.0", map[string]any{"podSelection": "all"})
	if err := all.status(); err != nil {
		t.Fatalf("STATUS podSelection all needs no kubelet: %v", err)
	}
}

func assertOnlyPrimary(t *testing.T, res types.Result, p *pod) {
	t.Helper()
	b, _ := json.Marshal(res)
	var r struct {
		Interfaces []struct{ Name, Sandbox string }
		IPs        []struct{ Address string }
	}
	_ = json.Unmarshal(b, &r)
	if len(r.IPs) != 1 || len(r.Interfaces) != 2 {
		t.Fatalf("result is not ptp's alone: %s", b)
	}
	for _, i := range r.Interfaces {
		if strings.HasPrefix(i.Name, "rdma") {
			t.Errorf("pass-through added %s", i.Name)
		}
	}
	_ = p.ns.Do(func(ns.NetNS) error {
		links, _ := nldump.LinkList(nil)
		var names []string
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		if !reflect.DeepEqual(names, []string{"lo", "eth0"}) {
			t.Errorf("pod links %v, want lo eth0", names)
		}
		eth0, _ := netlink.LinkByName("eth0")
		addrs, _ := nldump.AddrList(nil, eth0, netlink.FAMILY_V4)
		ip, _, _ := net.ParseCIDR(r.IPs[0].Address)
		if len(addrs) != 1 || !addrs[0].IP.Equal(ip) {
			t.Errorf("eth0 addrs %v, result %s", addrs, r.IPs[0].Address)
		}
		return nil
	})
}

func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	_ = json.Unmarshal(got, &g)
	_ = json.Unmarshal(want, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("result differs from primary's:\n got %s\nwant %s", got, want)
	}
}

func wantCode(t *testing.T, err error, code uint, substr string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != code {
		t.Fatalf("want CNI error code %d, got %v", code, err)
	}
	if !strings.Contains(te.Msg+" "+te.Details, substr) {
		t.Errorf("error %q does not mention %q", te.Error(), substr)
	}
}

// TestGCValidAttachments checks that GC with a valid-attachments list
// releases the records of attachments not in it (here: sharedLink none
// records, which need no RDMA kernel) and keeps the valid ones and other
// networks'.
func TestGCValidAttachments(t *testing.T) {
	testenv.Privileged(t)
	n := newNode(t, "1.1.0", nil)
	n.kubelet()
	keep, stale := n.pod("keep"), n.pod("stale")
	store := state.New(n.dataDir)
	for _, r := range []*state.Record{
		{Network: netName, ContainerID: keep.rt.ContainerID, IfName: "eth0", Mode: "shared", Links: []state.Link{{Device: "rxe0", Kind: state.LinkNone, Step: state.StepDone}}},
		{Network: netName, ContainerID: stale.rt.ContainerID, IfName: "eth0", Mode: "shared", Links: []state.Link{{Device: "rxe0", Kind: state.LinkNone, Step: state.StepDone}}},
		{Network: "othernet", ContainerID: "x", IfName: "eth0"},
	} {
		if err := store.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.gc(keep); err != nil {
		t.Fatalf("GC: %v", err)
	}
	recs, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range recs {
		left = append(left, r.Network+"/"+r.ContainerID)
	}
	sort.Strings(left)
	if want := []string{"othernet/x", netName + "/" + keep.rt.ContainerID}; !reflect.DeepEqual(left, want) {
		t.Errorf("records after GC %v, want %v", left, want)
	}
}
