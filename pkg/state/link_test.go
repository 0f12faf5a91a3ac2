package state

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestLinkKeepsHostIdentity checks that the host link's identity is
// flattened into the link: none of its keys may collide with the link's own
// (an embedded key a shallower one shadows is dropped without an error).
func TestLinkKeepsHostIdentity(t *testing.T) {
	in := Link{Device: "mlx5_bond_0", Kind: "moved", Step: "done", IPAMRange: "fd00:79::f:0:c00/124",
		HostLink: HostLink{HostName: "bond0", PodName: "rdma0", MAC: "02:00:00:00:00:01", HostIndex: 7,
			HostNetns: 4096, PermMAC: "02:00:00:00:00:02", LinkKind: "bond"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Link
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip lost fields:\n in  %+v\n out %+v\n json %s", in, out, b)
	}
}
