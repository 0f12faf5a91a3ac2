package state

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestVocabularyOnDisk checks that a record as released plugins write
// it, with the mode, every link kind and every step as strings, decodes
// to the named constants and encodes back byte for byte, so typed fields
// read records already on nodes and write what older plugins read.
func TestVocabularyOnDisk(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		mode  rdma.Mode
		kinds []LinkKind
		steps []Step
	}{
		{"exclusive",
			`{"version":1,"network":"n","containerID":"c1","ifName":"eth0","pod":{},"mode":"exclusive","links":[` +
				`{"device":"mlx5_0","kind":"moved","hostName":"eth1","step":"planned"},` +
				`{"device":"mlx5_1","kind":"moved","hostName":"eth2","step":"netdev-moving"},` +
				`{"device":"mlx5_2","kind":"moved","hostName":"eth3","step":"netdev-moved"},` +
				`{"device":"mlx5_3","kind":"moved","hostName":"eth4","step":"host-released"}],"createdAt":"0001-01-01T00:00:00Z"}`,
			rdma.ModeExclusive, []LinkKind{LinkMoved, LinkMoved, LinkMoved, LinkMoved},
			[]Step{StepPlanned, StepNetdevMoving, StepNetdevMoved, StepReleased}},
		{"shared",
			`{"version":1,"network":"n","containerID":"c2","ifName":"eth0","pod":{},"mode":"shared","links":[` +
				`{"device":"rxe0","kind":"ipvlan","hostName":"eth1","step":"child-adding"},` +
				`{"device":"rxe1","kind":"macvlan","hostName":"eth2","step":"done"},` +
				`{"device":"rxe2","kind":"none","hostName":"eth3","step":"done"}],"createdAt":"0001-01-01T00:00:00Z"}`,
			rdma.ModeShared, []LinkKind{LinkIPVlan, LinkMACVlan, LinkNone}, []Step{StepChildAdding, StepDone, StepDone}},
		{"pass-through",
			`{"version":1,"network":"n","containerID":"c3","ifName":"eth0","pod":{},"createdAt":"0001-01-01T00:00:00Z"}`,
			"", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := decodeRecord(tt.name, []byte(tt.data))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if rec.Mode != tt.mode || rec.ModeName() != tt.name {
				t.Errorf("mode %q (%s), want %q (%s)", rec.Mode, rec.ModeName(), tt.mode, tt.name)
			}
			if len(rec.Links) != len(tt.kinds) {
				t.Fatalf("%d links, want %d", len(rec.Links), len(tt.kinds))
			}
			for i, l := range rec.Links {
				if l.Kind != tt.kinds[i] || l.Step != tt.steps[i] {
					t.Errorf("link %d: kind %q step %q, want %q %q", i, l.Kind, l.Step, tt.kinds[i], tt.steps[i])
				}
			}
			again, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, []byte(tt.data)) {
				t.Errorf("encoded again\n %s\nwritten\n %s", again, tt.data)
			}
		})
	}
}
