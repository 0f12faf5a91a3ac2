package rdmares

import (
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// nla is one netlink attribute with its padding.
func nla(typ uint16, val ...[]byte) []byte {
	var v []byte
	for _, p := range val {
		v = append(v, p...)
	}
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32b(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
func u64b(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }
func cstr(s string) []byte { return append([]byte(s), 0) }

// reply is a RES dump message of device 3, rxe0, as nldev fills it.
func reply(table uint16, entries ...[]byte) []byte {
	return append(append(nla(attrDevIndex, u32b(3)), nla(attrDevName, cstr("rxe0"))...), nla(table, entries...)...)
}

// The entries as nldev fills them (fill_res_*_entry): a user QP with its
// peer's numbers, a kernel QP (ib_mad's QP1), an MR with rkey, lkey, a
// u64 pad attribute and a driver table, a PD whose task has exited.
var (
	userQP = nla(attrQPEntry, nla(3, u32b(1)), nla(attrLQPN, u32b(17)), nla(22, u32b(18)), nla(26, []byte{2}),
		nla(27, []byte{3}), nla(attrPDN, u32b(4)), nla(attrPID, u32b(4242)))
	kernQP = nla(attrQPEntry, nla(attrLQPN, u32b(1)), nla(26, []byte{5}), nla(attrKernName, cstr("ib_core")))
	userMR = nla(attrMREntry, nla(42, u32b(0x1234)), nla(43, u32b(0x1234)), nla(0, nil), nla(attrMRLen, u64b(65536)),
		nla(attrMRN, u32b(9)), nla(attrPDN, u32b(4)), nla(attrPID, u32b(4242)), nla(52, nla(53, nla(54, cstr("x")))))
	gonePD = nla(attrPDEntry, nla(38, u64b(2)), nla(attrPDN, u32b(4)))
)

func TestParseReply(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		msg  []byte
		want []Entry
		bad  string // part of the error; "" parses
	}{
		{"qps", QP, reply(attrResQP, userQP, kernQP), []Entry{
			{Kind: QP, Device: "rxe0", ID: 17, PID: 4242},
			{Kind: QP, Device: "rxe0", ID: 1, KernName: "ib_core"}}, ""},
		{"mr", MR, reply(attrResMR, userMR), []Entry{{Kind: MR, Device: "rxe0", ID: 9, PID: 4242, MRBytes: 65536}}, ""},
		{"pd of an exited task", PD, reply(attrResPD, gonePD), []Entry{{Kind: PD, Device: "rxe0", ID: 4}}, ""},
		{"empty table", CQ, reply(attrResCQ), []Entry{}, ""},
		{"unknown attribute skipped", QP, append(reply(attrResQP, userQP), nla(999, u32b(1))...), []Entry{{Kind: QP, Device: "rxe0", ID: 17, PID: 4242}}, ""},
		{"another device", QP, append(append(nla(attrDevIndex, u32b(4)), nla(attrDevName, cstr("rxe1"))...), nla(attrResQP)...), nil, "names device 4"},
		{"no table", QP, append(nla(attrDevIndex, u32b(3)), nla(attrDevName, cstr("rxe0"))...), nil, "lacks"},
		{"another kind's table", QP, reply(attrResMR, userMR), nil, "lacks"},
		{"two tables", QP, append(reply(attrResQP, userQP), nla(attrResQP)...), nil, "qp table twice"},
		{"device index of 2 bytes", QP, append(append(nla(attrDevIndex, []byte{3, 0}), nla(attrDevName, cstr("rxe0"))...), nla(attrResQP)...), nil, "2 bytes"},
		{"name without NUL", QP, append(append(nla(attrDevIndex, u32b(3)), nla(attrDevName, []byte("rxe0"))...), nla(attrResQP)...), nil, "NUL-terminated"},
		{"other attribute in the table", QP, reply(attrResQP, nla(attrMREntry)), nil, "attribute 41"},
		{"entry without id", QP, reply(attrResQP, nla(attrQPEntry, nla(attrPID, u32b(1)))), nil, "without its id"},
		{"MR without length", MR, reply(attrResMR, nla(attrMREntry, nla(attrMRN, u32b(1)))), nil, "without its length"},
		{"MR length of 4 bytes", MR, reply(attrResMR, nla(attrMREntry, nla(attrMRN, u32b(1)), nla(attrMRLen, u32b(1)))), nil, "want 8"},
		{"pid 0", QP, reply(attrResQP, nla(attrQPEntry, nla(attrLQPN, u32b(1)), nla(attrPID, u32b(0)))), nil, "pid 0"},
		{"pid and kernel", QP, reply(attrResQP, nla(attrQPEntry, nla(attrLQPN, u32b(1)), nla(attrPID, u32b(7)), nla(attrKernName, cstr("k")))), nil, "both"},
		{"two pids", QP, reply(attrResQP, nla(attrQPEntry, nla(attrLQPN, u32b(1)), nla(attrPID, u32b(7)), nla(attrPID, u32b(8)))), nil, "pid twice"},
		{"empty kernel owner", QP, reply(attrResQP, nla(attrQPEntry, nla(attrLQPN, u32b(1)), nla(attrKernName, cstr("")))), nil, "empty kernel owner"},
		{"truncated", QP, reply(attrResQP, userQP)[:30], nil, "attribute length"},
		{"trailing bytes", QP, append(reply(attrResQP, userQP), 1, 0), nil, "trailing"},
		{"length below header", QP, []byte{2, 0, 1, 0}, nil, "attribute length 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReply(tc.kind, 3, tc.msg)
			if tc.bad != "" {
				if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("err %v, want ErrMalformed with %q (entries %+v)", err, tc.bad, got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := ParseReply("srq", 3, reply(attrResQP)); err == nil {
		t.Error("an unknown kind parsed")
	}
}

func TestAttribute(t *testing.T) {
	entries := []Entry{
		{Kind: QP, Device: "rxe0", ID: 17, PID: 10},
		{Kind: MR, Device: "rxe0", ID: 1, PID: 10, MRBytes: 4096},
		{Kind: MR, Device: "rxe0", ID: 2, PID: 11, MRBytes: 100},
		{Kind: PD, Device: "rxe1", ID: 3, PID: 11},
		{Kind: CQ, Device: "rxe0", ID: 4, PID: 20}, // another pod
		{Kind: QP, Device: "rxe0", ID: 7, PID: 40}, // a host process
		{Kind: QP, Device: "rxe0", ID: 1, KernName: "ib_core"},
		{Kind: PD, Device: "rxe0", ID: 5},           // exited task
		{Kind: QP, Device: "rxe0", ID: 18, PID: 30}, // unreadable
		{Kind: CQ, Device: "rxe0", ID: 6, PID: 30},  // unreadable, read once
	}
	reads := map[uint32]int{}
	podOf := func(pid uint32) (string, error) {
		reads[pid]++
		switch pid {
		case 10, 11:
			return "uid-a", nil
		case 20:
			return "uid-b", nil
		case 40:
			return "", nil
		}
		return "", os.ErrNotExist
	}
	tally := Attribute(entries, podOf)
	got := tally.Take("uid-a")
	want := map[string]Usage{
		"rxe0": {QP: 1, MR: 2, MRBytes: 4196, PIDs: []uint32{10, 11}},
		"rxe1": {PD: 1, PIDs: []uint32{11}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pod uid-a: %+v, want %+v", got, want)
	}
	if again := tally.Take("uid-a"); len(again) != 0 {
		t.Errorf("pod uid-a taken twice: %+v", again)
	}
	tally.Rest()
	wantUn := map[Unattributed]int{
		{"rxe0", CQ, OtherPod}: 1, {"rxe0", QP, NoPod}: 1, {"rxe0", QP, KernelOwned}: 1, {"rxe0", PD, NoPID}: 1,
		{"rxe0", QP, Unreadable}: 1, {"rxe0", CQ, Unreadable}: 1,
	}
	if !reflect.DeepEqual(tally.Unattributed, wantUn) {
		t.Errorf("unattributed %+v, want %+v", tally.Unattributed, wantUn)
	}
	if reads[30] != 1 || reads[10] != 1 {
		t.Errorf("cgroup reads per pid %v, want one each", reads)
	}
}
