package smc

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEnsurePnet(t *testing.T) {
	eth := PnetEntry{PnetID: "net1", EthName: "eth0"}
	ib := PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 1}
	tests := []struct {
		name     string
		k        *fakeKernel
		in       PnetEntry
		want     PnetEntry
		conflict bool
		exists   bool // error wraps ErrExists but is no conflict
	}{
		{name: "fresh eth add", k: newFakeKernel(false), in: eth, want: PnetEntry{PnetID: "NET1", EthName: "eth0"}},
		{name: "fresh ib add, port defaults to 1", k: newFakeKernel(true),
			in: PnetEntry{PnetID: "NET1", IBName: "rxe0"}, want: ib},
		{name: "EEXIST same id eth", k: newFakeKernel(false, PnetEntry{PnetID: "NET1", EthName: "eth0"}),
			in: eth, want: PnetEntry{PnetID: "NET1", EthName: "eth0"}},
		{name: "EEXIST other id eth", k: newFakeKernel(false, PnetEntry{PnetID: "OTHER", EthName: "eth0"}),
			in: eth, want: PnetEntry{PnetID: "OTHER", EthName: "eth0"}, conflict: true},
		{name: "EEXIST same id ib", k: newFakeKernel(true, ib), in: ib, want: ib},
		{name: "EEXIST ib port with other id", k: newFakeKernel(true, PnetEntry{PnetID: "ENI1", IBName: "rxe0", IBPort: 1}),
			in: ib, want: PnetEntry{PnetID: "ENI1", IBName: "rxe0", IBPort: 1}, conflict: true},
		{name: "second port of a device, same id", k: newFakeKernel(true, ib),
			in:   PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 2},
			want: PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 2}},
		{name: "ib add outside init_net", k: newFakeKernel(false), in: ib, exists: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(t, newFake(tt.k.handle))
			got, err := c.EnsurePnet(tt.in)
			var ce *ConflictError
			switch {
			case tt.conflict:
				if !errors.As(err, &ce) || ce.Existing != tt.want || !errors.Is(err, ErrExists) {
					t.Fatalf("err = %v, want conflict with %+v", err, tt.want)
				}
			case tt.exists:
				if !errors.Is(err, ErrExists) || errors.As(err, &ce) {
					t.Fatalf("err = %v, want plain ErrExists", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRemovePnetValidation checks that entries to remove come back from
// attachment records on disk; one the kernel could not hold is refused
// before any request (EnsurePnet leaves that to pkg/config and the
// kernel).
func TestRemovePnetValidation(t *testing.T) {
	bad := []PnetEntry{
		{PnetID: "", EthName: "eth0"},
		{PnetID: strings.Repeat("A", 17), EthName: "eth0"},
		{PnetID: "NET-1", EthName: "eth0"},
		{PnetID: "NET_1", EthName: "eth0"},
		{PnetID: "NET1"},
		{PnetID: "NET1", EthName: "eth0", IBName: "rxe0"},
		{PnetID: "NET1", IBName: "rxe0", IBPort: 3},
		{PnetID: "NET1", EthName: "averyveryverylongname"},
	}
	for _, e := range bad {
		f := newFake(newFakeKernel(true).handle)
		c := newFakeClient(t, f)
		if err := c.RemovePnet(e); err == nil || errors.Is(err, ErrExists) {
			t.Errorf("%+v: err = %v, want validation error", e, err)
		}
		if len(f.sent) != 0 {
			t.Errorf("%+v: %d requests sent", e, len(f.sent))
		}
	}
}

func TestRemovePnet(t *testing.T) {
	ib := PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 1}
	host := PnetEntry{PnetID: "NET1", EthName: "eth1"}
	tests := []struct {
		name     string
		k        *fakeKernel
		in       PnetEntry
		wantDel  bool
		wantRows []PnetEntry
	}{
		{"pod eth entry", newFakeKernel(false, PnetEntry{PnetID: "NET1", EthName: "eth0"}),
			PnetEntry{PnetID: "net1", EthName: "eth0"}, true, nil},
		{"ib entry shares id with host eth entry", newFakeKernel(true, ib, host), ib, true, []PnetEntry{host}},
		{"entry gone, id still used", newFakeKernel(true, host), ib, false, []PnetEntry{host}},
		{"nothing there", newFakeKernel(false), PnetEntry{PnetID: "NET1", EthName: "eth0"}, true, nil},
		{"other id on same netdev untouched", newFakeKernel(false, PnetEntry{PnetID: "X", EthName: "eth0"}),
			PnetEntry{PnetID: "NET1", EthName: "eth0"}, true, []PnetEntry{{PnetID: "X", EthName: "eth0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.k.handle)
			c := newFakeClient(t, f)
			if err := c.RemovePnet(tt.in); err != nil {
				t.Fatal(err)
			}
			if got := sentCmd(f, pnetCmdDel); got != tt.wantDel {
				t.Errorf("DEL sent = %v, want %v", got, tt.wantDel)
			}
			if !reflect.DeepEqual(tt.k.table, tt.wantRows) {
				t.Errorf("table %+v, want %+v", tt.k.table, tt.wantRows)
			}
		})
	}
}

func TestRemovePnetClearsPortOfIB(t *testing.T) {
	ib := PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 1}
	k := newFakeKernel(true, ib)
	c := newFakeClient(t, newFake(k.handle))
	if err := c.RemovePnet(ib); err != nil {
		t.Fatal(err)
	}
	if len(k.ports) != 0 || len(k.table) != 0 {
		t.Fatalf("ports %v table %v, want empty", k.ports, k.table)
	}
}

func sentCmd(f *fakeTransport, cmd uint8) bool {
	for _, s := range f.sent {
		if s.family == fakePnetID && s.cmd == cmd {
			return true
		}
	}
	return false
}

func TestPnetRequestsAndErrors(t *testing.T) {
	k := newFakeKernel(false)
	f := newFake(k.handle)
	c := newFakeClient(t, f)
	if err := c.PnetAdd(PnetEntry{PnetID: "net1", EthName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if s := f.sent[0]; s.family != fakePnetID || s.flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK || s.attrOf(pnetAttrName) != "NET1" {
		t.Fatalf("add sent %+v", s)
	}
	if _, err := c.PnetDump(); err != nil || f.sent[1].flags != unix.NLM_F_REQUEST|unix.NLM_F_DUMP {
		t.Fatalf("dump flags %#x err %v", f.sent[1].flags, err)
	}
	if err := c.PnetDel("NOPE"); err != nil {
		t.Fatalf("del of unknown id: %v", err)
	}
	k.errs[pnetCmdDel] = unix.EPERM
	err := c.PnetDel("NET1")
	if !errors.Is(err, unix.EPERM) || err.Error() != "delete pnet entries of NET1: CAP_NET_ADMIN required: operation not permitted" {
		t.Fatalf("del err = %v", err)
	}
	k.errs[pnetCmdAdd] = unix.EEXIST
	if err := c.PnetAdd(PnetEntry{PnetID: "NET1", EthName: "eth0"}); !errors.Is(err, ErrExists) {
		t.Fatalf("add err = %v", err)
	}
}

func TestFamilyMissing(t *testing.T) {
	f := newFake(nil)
	delete(f.families, pnetFamilyName)
	if _, err := newClient(f); !errors.Is(err, ErrUnavailable) || !f.closed {
		t.Fatalf("err = %v closed = %v", err, f.closed)
	}
	f = newFake(newFakeKernel(false).handle)
	delete(f.families, genFamilyName)
	c := newFakeClient(t, f)
	if _, err := c.UEIDs(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("UEIDs err = %v", err)
	}
	if _, err := c.PnetDump(); err != nil {
		t.Fatalf("pnet without SMC_GEN_NETLINK: %v", err)
	}
}
