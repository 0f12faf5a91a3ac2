package chain

import (
	"slices"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestAddReleasedMidway checks that an attachment released while its ADD
// runs without the node lock (the reconcile daemon's DEL, or the
// runtime's) is not written back by ADD's last phase: ADD fails, so that
// the runtime tries again, and gives back what it made after the release,
// leaving no record of an attachment that no longer exists.
func TestAddReleasedMidway(t *testing.T) {
	const conf = `,"podSelection":"all","ipam":{"type":"host-local"}`
	for _, c := range []struct {
		name string
		mode rdma.Mode
		dev  rdma.Device
	}{
		{"shared", rdma.ModeShared, rxe("rxe0", "veth0")},
		{"exclusive", rdma.ModeExclusive, rdma.Device{Name: "mlx5_0", Driver: "mlx5_core", Netdev: "eth1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &world{mode: c.mode, devices: []rdma.Device{c.dev}}
			p := w.plugin()
			var delErr error
			w.onIPAM = func() {
				w.onIPAM = nil
				delErr = p.Del(cmd(dir, conf, ""))
			}
			w.stdout.Reset()
			err := p.Add(cmd(dir, conf, prevResult100))
			if delErr != nil {
				t.Fatalf("the DEL during ADD: %v", delErr)
			}
			wantCode(t, err, CodeState, "released while ADD ran")
			if w.stdout.Len() != 0 {
				t.Errorf("ADD printed a result: %s", w.stdout.String())
			}
			if _, err := state.New(dir).Get(state.Key{Network: "rdmanet", ContainerID: "c1", IfName: "eth0"}); err == nil {
				t.Error("ADD wrote back the record of an attachment its DEL released")
			}
			if n := len(filterCalls(w.calls, "IPAMDel")); n < 2 {
				t.Errorf("IPAM DELs %d, want the DEL's and the failed ADD's (its lease came after the DEL): %v", n, w.calls)
			}
			if !slices.ContainsFunc(w.calls, func(s string) bool { return s == "IPAMAdd c1 eth0" || s == "IPAMAdd c1 rdma0" }) {
				t.Errorf("no IPAM ADD: %v", w.calls)
			}
		})
	}
}
