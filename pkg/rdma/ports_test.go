package rdma

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestPortsAndGIDs(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class/infiniband/rxe0/ports/1")
	files := map[string]string{
		"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n",
		"gids/0": "fe80:0000:0000:0000:5054:00ff:fe12:3456\n", "gids/1": zeroGID + "\n",
		"gids/2":            "0000:0000:0000:0000:0000:ffff:0a01:0005\n",
		"gid_attrs/ndevs/0": "eth1\n", "gid_attrs/ndevs/2": "eth1\n",
		"gid_attrs/types/0": "IB/RoCE v1\n", "gid_attrs/types/2": "RoCE v2\n",
	}
	for name, content := range files {
		p := filepath.Join(port, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := &System{SysRoot: root}
	ports, err := k.Ports("rxe0")
	if err != nil || len(ports) != 1 || ports[0] != (Port{Port: 1, State: "ACTIVE", PhysState: "LinkUp", GIDs: 2}) {
		t.Errorf("ports %+v %v", ports, err)
	}
	gids, err := k.GIDs()
	if err != nil || len(gids) != 2 || gids[1].Index != 2 || gids[1].Type != "RoCE v2" || gids[1].Netdev != "eth1" {
		t.Errorf("gids %+v %v", gids, err)
	}
}

// TestReadPortStats: a sysfs tree as soft-RoCE has it: state words,
// counters and hw_counters without lifespan (a setting), non-numbers left out.
func TestReadPortStats(t *testing.T) {
	root := t.TempDir()
	ib := filepath.Join(root, "class", "infiniband")
	files := map[string]string{
		"rxe0/ports/1/state": "4: ACTIVE\n", "rxe0/ports/1/phys_state": "5: LinkUp\n",
		"rxe0/ports/1/counters/port_xmit_data": "120\n", "rxe0/ports/1/hw_counters/sent_pkts": "41\n",
		"rxe0/ports/1/hw_counters/lifespan": "10\n", "rxe0/ports/1/hw_counters/bogus": "n/a\n",
		"rxe0/ports/1/gids/0": "fe80::\n",
	}
	for name, data := range files {
		p := filepath.Join(ib, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := (&System{SysRoot: root}).PortStats()
	if err != nil {
		t.Fatal(err)
	}
	want := []PortStats{{Device: "rxe0", Port: 1, State: "ACTIVE", PhysState: "LinkUp",
		Counters: map[string]float64{"port_xmit_data": 120}, HWCounters: map[string]float64{"sent_pkts": 41}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := (&System{SysRoot: filepath.Join(root, "none")}).PortStats(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}
