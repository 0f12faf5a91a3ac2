package chain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// TestGIDRoom checks that a shared-mode link that will get an address
// needs room for it in its port's GID table (the kernel adds no GID to
// a full table and says nothing): refused before the child is made, the
// record gone; a link without an address, or a port without a table, is
// not checked. The table is the fake's (logic only); pkg/rdma reads the
// kernel's rows.
func TestGIDRoom(t *testing.T) {
	tests := []struct {
		name    string
		conf    string
		gids    [2]int // free, size
		readErr error
		code    uint // 0: attached
	}{
		{"room", withIPAM, [2]int{2, 1024}, nil, 0},
		{"full", withIPAM, [2]int{0, 1024}, nil, CodeGIDTableFull},
		{"one entry left", withIPAM, [2]int{1, 16}, nil, CodeGIDTableFull},
		{"unreadable table", withIPAM, [2]int{}, errors.New("EIO"), CodeGIDTableFull},
		{"no table", withIPAM, [2]int{0, 0}, nil, 0},
		{"no address: not checked", `,"podSelection":"all"`, [2]int{0, 1024}, errors.New("EIO"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{mode: rdma.ModeShared, devices: []rdma.Device{rxe("rxe0", "veth0")},
				gids: map[string][2]int{"rxe0": tt.gids}, failOn: map[string]error{"FreeGIDs": tt.readErr}}
			dir := t.TempDir()
			err := w.plugin().Add(cmd(dir, tt.conf, prevResult100))
			if tt.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tt.code, "rxe0")
			if tt.readErr == nil && !strings.Contains(err.Error(), "no RoCE GID") {
				t.Errorf("error %q does not say why", err)
			}
			if slices.ContainsFunc(w.calls, func(c string) bool { return strings.HasPrefix(c, "AddChild") || strings.HasPrefix(c, "IPAMAdd") }) {
				t.Errorf("a child or a lease after the refusal: %v", w.calls)
			}
			if recs, _ := state.New(dir).List(); len(recs) != 0 {
				t.Errorf("records left: %+v", recs)
			}
		})
	}
}
