package inspect

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// fakeUsage is a node where pids 10 and 11 are in the cgroup of pod
// uid-a (netns /run/netns/a, inode 100), pid 30 in another pod's;
// /run/netns/c (pod uid-c) has inode 300; /run/netns/b is gone.
type fakeUsage struct{}

func (fakeUsage) NetnsMode() (rdma.Mode, error) { return rdma.ModeShared, nil }
func (fakeUsage) Resources(ns string) ([]rdmares.Entry, error) {
	return []rdmares.Entry{
		{Kind: rdmares.QP, Device: "rxe0", ID: 17, PID: 10},
		{Kind: rdmares.MR, Device: "rxe0", ID: 1, PID: 10, MRBytes: 4096},
		{Kind: rdmares.MR, Device: "rxe0", ID: 2, PID: 11, MRBytes: 100},
		{Kind: rdmares.QP, Device: "rxe0", ID: 18, PID: 30},
	}, nil
}
func (fakeUsage) PodOf(pid uint32) (string, error) {
	return map[uint32]string{10: "uid-a", 11: "uid-a", 30: "uid-x"}[pid], nil
}
func (fakeUsage) LiveNetns(r *state.Record) (uint64, error) {
	return map[string]uint64{"/run/netns/a": 100, "/run/netns/c": 300}[r.NetNS], nil
}

// TestInspectUsage checks that each attachment whose netns lives shows
// what its pod's processes hold, in text and JSON; the gone pod shows
// nothing.
func TestInspectUsage(t *testing.T) {
	in := &inspector{k: newFakeReader(), usage: fakeUsage{}, dataDirs: []string{writeState(t)}}
	r := in.inspect("")
	var text bytes.Buffer
	WriteText(&text, r)
	for _, want := range []string{
		"  rdmanet/aaaa/eth0  pod default/smc-pod  shared  netns /run/netns/a  since 2026-11-23T09:00:00Z\n" +
			"    link rxe0 ipvlan as rdma0 (host eth1) ips fd00:77::10/64 step done\n" +
			"    SMC-R pnetid RXE0: rxe0 port 1, pod eth0\n" +
			"    RDMA use rxe0: 1 QP, 0 CQ, 2 MR (4196 bytes), 0 PD; pids 10 11\n",
		"    RDMA use rxe0: 0 QP, 0 CQ, 0 MR (0 bytes), 0 PD\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks:\n%s\n--- text:\n%s", want, text.String())
		}
	}
	b, err := json.Marshal(r.Attachments)
	want := `"rdmaUsage":[{"device":"rxe0","qp":1,"cq":0,"mr":2,"pd":0,"mrBytes":4196,"pids":[10,11]}]`
	if err != nil || !bytes.Contains(b, []byte(want)) || bytes.Count(b, []byte(`"rdmaUsage"`)) != 2 {
		t.Errorf("json %s (%v), want two attachments with usage, one %s", b, err, want)
	}
}
