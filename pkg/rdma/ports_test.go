package rdma

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

func TestPortsAndGIDs(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class/infiniband/rxe0/ports/1")
	if err := os.MkdirAll(filepath.Join(root, "class/infiniband/rxe1/ports/1/gids"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe1/ports/1/gids/0"), []byte("fe80:0000:0000:0000:5054:00ff:fe12:3457\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err != nil || len(gids) != 3 || gids[1].Index != 2 || gids[1].Type != "RoCE v2" || gids[1].Netdev != "eth1" || gids[2].Device != "rxe1" {
		t.Errorf("gids %+v %v", gids, err)
	}
	one, err := k.DeviceGIDs("rxe0")
	if err != nil || !reflect.DeepEqual(one, gids[:2]) {
		t.Errorf("rxe0's gids %+v %v, want %+v", one, err, gids[:2])
	}
	for _, bad := range []string{"rxe9", "", "..", "rxe0/ports", "../infiniband/rxe0"} {
		if got, err := k.DeviceGIDs(bad); err == nil {
			t.Errorf("DeviceGIDs(%q) = %+v, want an error", bad, got)
		}
	}
}

// TestReadPortStats reads a sysfs tree as soft-RoCE has it: state words,
// rate, GID table, counters and hw_counters without lifespan (a setting),
// non-numbers left out.
func TestReadPortStats(t *testing.T) {
	root := t.TempDir()
	ib := filepath.Join(root, "class", "infiniband")
	files := map[string]string{
		"rxe0/ports/1/state": "4: ACTIVE\n", "rxe0/ports/1/phys_state": "5: LinkUp\n",
		"rxe0/ports/1/counters/port_xmit_data": "120\n", "rxe0/ports/1/hw_counters/sent_pkts": "41\n",
		"rxe0/ports/1/hw_counters/lifespan": "10\n", "rxe0/ports/1/hw_counters/bogus": "n/a\n",
		"rxe0/ports/1/gids/0": "fe80:0000:0000:0000:5054:00ff:fe12:3456\n", "rxe0/ports/1/gids/1": zeroGID + "\n",
		"rxe0/ports/1/rate": "10 Gb/sec (1X QDR)\n",
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
		Counters: map[string]float64{"port_xmit_data": 120}, HWCounters: map[string]float64{"sent_pkts": 41},
		Rate: 1.25e9, GIDs: &GIDTable{Used: 1, Size: 2}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := (&System{SysRoot: filepath.Join(root, "none")}).PortStats(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}

// TestFreeGIDs checks that free rows are the zero GID; reading stops at
// the wanted count; an unreadable row or a missing table is an error.
func TestFreeGIDs(t *testing.T) {
	used := "0000:0000:0000:0000:0000:ffff:0a01:0005\n"
	tests := []struct {
		name      string
		rows      []string // "" : a directory where the row should be (unreadable)
		want      int
		free, siz int
		err       bool
	}{
		{"room", []string{used, used, zeroGID, zeroGID, zeroGID}, 2, 2, 5, false},
		{"one free", []string{used, zeroGID, used, used}, 2, 1, 4, false},
		{"free rows below used ones", []string{zeroGID, zeroGID, used}, 2, 2, 3, false},
		{"full", []string{used, used}, 2, 0, 2, false},
		{"unreadable row", []string{"", used}, 2, 0, 2, true},
		{"empty table", nil, 2, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.mkdir("class/infiniband/rxe0/ports/1/gids")
			for i, r := range tt.rows {
				rel := filepath.Join("class/infiniband/rxe0/ports/1/gids", strconv.Itoa(i))
				if r == "" {
					f.mkdir(rel)
					continue
				}
				f.write(rel, r)
			}
			free, size, err := f.system(nil).FreeGIDs("rxe0", 1, tt.want)
			if free != tt.free || size != tt.siz || (err != nil) != tt.err {
				t.Errorf("free %d size %d err %v, want %d %d error %v", free, size, err, tt.free, tt.siz, tt.err)
			}
		})
	}
	if _, _, err := newFixture(t).system(nil).FreeGIDs("mlx5_0", 1, 2); err == nil {
		t.Error("a device without a GID table: no error")
	}
}

// BenchmarkFreeGIDs measures what ADD's GID check reads of a 1,024-row
// table (as rxe has) on a file system fixture, the kernel's lowest rows
// used: 600 (room: it stops at the second free row from the top) and all
// (full: it reads every row).
func BenchmarkFreeGIDs(b *testing.B) {
	for _, used := range []int{600, 1024} {
		b.Run(fmt.Sprintf("used=%d", used), func(b *testing.B) {
			root := b.TempDir()
			dir := filepath.Join(root, "class/infiniband/rxe0/ports/1/gids")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range 1024 {
				row := zeroGID
				if i < used {
					row = "fe80:0000:0000:0000:5054:00ff:fe12:3456"
				}
				if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), []byte(row+"\n"), 0o444); err != nil {
					b.Fatal(err)
				}
			}
			s := &System{SysRoot: root}
			for b.Loop() {
				if _, _, err := s.FreeGIDs("rxe0", 1, 2); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
