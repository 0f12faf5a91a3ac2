package chain

import (
	"fmt"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// The pass-through ADD is what every pod without RDMA pays: parse, one
// kubelet lookup (faked), print.
func BenchmarkAddPassThrough(b *testing.B) {
	w := &world{}
	p := w.plugin()
	args := cmd(b.TempDir(), "", prevResult100)
	b.ReportAllocs()
	for b.Loop() {
		w.stdout.Reset()
		w.stderr.Reset()
		w.calls = w.calls[:0]
		if err := p.Add(args); err != nil {
			b.Fatal(err)
		}
	}
}

// A shared-mode ADD+DEL cycle with the kernel faked: the plugin's own cost
// (state writes with fsync, lock, selection, result conversion).
func BenchmarkAddDelShared(b *testing.B) {
	w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
		allocs: []podres.Allocation{{ResourceName: "rdma/hca", DeviceIDs: []string{"1"}}}}
	p := w.plugin()
	dir := b.TempDir()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		args := cmd(dir, "", prevResult100)
		args.ContainerID = fmt.Sprintf("c%d", i)
		i++
		w.stdout.Reset()
		w.stderr.Reset()
		w.calls = w.calls[:0]
		if err := p.Add(args); err != nil {
			b.Fatal(err)
		}
		if err := p.Del(args); err != nil {
			b.Fatal(err)
		}
	}
}

// Device selection over a node with many devices and IDs.
func BenchmarkSelectDevices(b *testing.B) {
	var offered []rdma.Device
	var ids []string
	for i := range 64 {
		offered = append(offered, rdma.Device{Name: fmt.Sprintf("mlx5_%d", i), Netdev: fmt.Sprintf("eth%d", i)})
		ids = append(ids, fmt.Sprintf("mlx5_%d", i))
	}
	req := &request{ids: ids}
	in := selectInput{mode: rdma.ModeShared, offered: offered}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := selectDevices(req, in); err != nil {
			b.Fatal(err)
		}
	}
}
