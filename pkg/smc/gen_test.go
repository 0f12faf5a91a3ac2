package smc

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestEncodeUEID checks UEID requests against net/smc/smc_clc.c's
// smc_nl_add_ueid. The attribute must be exactly SMC_MAX_EID_LEN+1 = 33
// bytes, so nla_len = 4+33 = 37 (0x25), padded to 40: "ABC", 29 blanks,
// NUL, 3 pad bytes.
func TestEncodeUEID(t *testing.T) {
	padded := padUEID("abc")
	want := []byte{0x0a, 0x01, 0x00, 0x00, 0x25, 0x00, 0x01, 0x00, 'A', 'B', 'C'}
	want = append(want, bytes.Repeat([]byte{' '}, 29)...)
	want = append(want, 0, 0, 0, 0)
	if got := encodeUEID(genCmdAddUEID, padded); !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
	if got := encodeUEIDDump(); !bytes.Equal(got, []byte{0x09, 0x01, 0, 0}) {
		t.Fatalf("dump % x", got)
	}
}

// TestPadUEID checks that the characters are pkg/config's to check;
// padUEID only upper-cases and pads, and never panics on a UEID longer
// than 32 (the kernel refuses that one with EINVAL).
func TestPadUEID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SMC-R.V2", "SMC-R.V2" + strings.Repeat(" ", 24)},
		{"rdma-chain ", "RDMA-CHAIN" + strings.Repeat(" ", 22)},
		{strings.Repeat("a", 32), strings.Repeat("A", 32)},
		{strings.Repeat("A", 33), strings.Repeat("A", 33)},
		{"", strings.Repeat(" ", 32)},
	}
	for _, tt := range tests {
		if got := padUEID(tt.in); got != tt.want {
			t.Errorf("padUEID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUEIDCalls(t *testing.T) {
	var answer error
	f := newFake(func(s sent) ([][]byte, error) {
		if s.cmd == genCmdDumpUEID {
			return [][]byte{
				genl(genCmdDumpUEID, nla(ueidAttrEntry, cstr("ABC"+strings.Repeat(" ", 29)))),
				genl(genCmdDumpUEID, nla(ueidAttrEntry, cstr("SMC-R.V2"+strings.Repeat(" ", 24)))),
			}, nil
		}
		return nil, answer
	})
	c := newFakeClient(t, f)
	got, err := c.UEIDs()
	if err != nil || !reflect.DeepEqual(got, []string{"ABC", "SMC-R.V2"}) {
		t.Fatalf("UEIDs = %q, %v", got, err)
	}
	for _, tt := range []struct {
		errno error
		ok    bool // nil error expected
	}{
		{nil, true}, {unix.EEXIST, true}, {unix.ENOENT, false}, {unix.ERANGE, false}, {unix.EINVAL, false},
	} {
		answer = tt.errno
		err := c.UEIDAdd("abc")
		if (err == nil) != tt.ok {
			t.Errorf("add with %v: %v", tt.errno, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "add UEID abc: ") {
			t.Errorf("add with %v: %q does not name the step", tt.errno, err)
		}
	}
	last := f.sent[len(f.sent)-1]
	if last.family != fakeGenID || last.cmd != genCmdAddUEID || len(last.attrs[0].Data) != 33 {
		t.Fatalf("add sent %+v", last)
	}
}

// fallbackFirstMsg is the first message of a fallback stats dump
// (net/smc/smc_stats.c smc_nl_get_fback_details), which has one message
// per reason, SMC_GEN_FBACK_STATS (8) nest with TYPE u8,
// SRV_CNT/CLNT_CNT u64 (first message only, possibly after a PAD attr of
// type 0 on architectures that align u64), RSN_CODE u32, RSN_CNT u16.
var fallbackFirstMsg = []byte{
	0x08, 0x01, 0x00, 0x00, // GET_FBACK_STATS, version 1
	0x38, 0x00, 0x08, 0x80, // nest len 4+8+4+12+12+8+8 = 56, type 8|NLA_F_NESTED
	0x05, 0x00, 0x01, 0x00, 0x01, 0, 0, 0, // TYPE = server
	0x04, 0x00, 0x00, 0x00, // PAD
	0x0c, 0x00, 0x02, 0x00, 9, 0, 0, 0, 0, 0, 0, 0, // SRV_CNT 9
	0x0c, 0x00, 0x03, 0x00, 4, 0, 0, 0, 0, 0, 0, 0, // CLNT_CNT 4
	0x08, 0x00, 0x04, 0x00, 0x02, 0x00, 0x03, 0x03, // RSN_CODE 0x03030002
	0x06, 0x00, 0x05, 0x00, 0x09, 0x00, 0, 0, // RSN_CNT 9
}

// fallbackSecondMsg is a client-side reason without the totals.
func fallbackSecondMsg() []byte {
	return genl(genCmdGetFbackStats, nest(genAttrFbackStats,
		nla(fbAttrType, []byte{0}), nla(fbAttrRsnCode, le32(0x03030000)), nla(fbAttrRsnCnt, le16(4))))
}

func TestDecodeFallback(t *testing.T) {
	got, err := decodeFallback([][]byte{fallbackFirstMsg, fallbackSecondMsg()})
	if err != nil {
		t.Fatal(err)
	}
	want := FallbackReport{ServerTotal: 9, ClientTotal: 4, Reasons: []FallbackStat{
		{Server: true, Reason: 0x03030002, Count: 9}, {Server: false, Reason: 0x03030000, Count: 4},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got, _ := decodeFallback(nil); len(got.Reasons) != 0 {
		t.Fatalf("empty dump: %+v", got)
	}
}

// devSMCRMsgs returns an SMC-R device dump (net/smc/smc_ib.c
// smc_nl_handle_smcr_dev) of erdma and mlx devices: one message per
// device, SMC_GEN_DEV_SMCR (6) nest with IS_CRIT, PCI values, IB_NAME and
// one SMC_NLA_DEV_PORT+i nest per valid port (PNET_USR, PNETID, NETDEV,
// VALID, STATE, LNK_CNT).
func devSMCRMsgs() (erdma, mlx []byte) {
	port := func(typ uint16, usr byte, id string, ifidx uint32, state byte, links uint32) []byte {
		return nest(typ, nla(portAttrPnetUsr, []byte{usr}), nla(portAttrPnetID, cstr(id)),
			nla(portAttrNetdev, le32(ifidx)), nla(portAttrValid, []byte{1}),
			nla(portAttrState, []byte{state}), nla(portAttrLnkCnt, le32(links)))
	}
	erdma = genl(genCmdGetDevSMCR, nest(genAttrDevSMCR,
		nla(devAttrIsCrit, []byte{1}), nla(3, le32(0)), nla(4, le16(0)), nla(5, le16(0x1ded)), nla(6, le16(0x107f)),
		nla(devAttrPCIID, cstr("0000:00:05.0")), nla(devAttrIBName, cstr("erdma_0")),
		port(devAttrPort, 1, "00163E0ABCDE", 2, 1, 3)))
	mlx = genl(genCmdGetDevSMCR, nest(genAttrDevSMCR,
		nla(devAttrIsCrit, []byte{0}), nla(devAttrIBName, cstr("mlx5_0")),
		port(devAttrPort, 0, "", 0, 0, 0), port(devAttrPort2, 0, "HWPNET          ", 7, 1, 0)))
	return erdma, mlx
}

func TestDecodeDevSMCR(t *testing.T) {
	erdma, mlx := devSMCRMsgs()
	got, err := decodeDevSMCR([][]byte{erdma, mlx})
	if err != nil {
		t.Fatal(err)
	}
	want := []SMCRDevice{
		{Name: "erdma_0", Port: 1, PCIID: "0000:00:05.0", Critical: true, PnetID: "00163E0ABCDE",
			PnetByUser: true, NetdevIndex: 2, Active: true, LinkCount: 3},
		{Name: "mlx5_0", Port: 1},
		{Name: "mlx5_0", Port: 2, PnetID: "HWPNET", NetdevIndex: 7, Active: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if _, err := decodeDevSMCR([][]byte{erdma[:len(erdma)-3]}); err == nil {
		t.Fatal("truncated message: want error")
	}
}

func TestSMCRDevicesNames(t *testing.T) {
	c := newFakeClient(t, newFake(func(s sent) ([][]byte, error) {
		return [][]byte{genl(genCmdGetDevSMCR, nest(genAttrDevSMCR, nla(devAttrIBName, cstr("rxe0")),
			nest(devAttrPort, nla(portAttrNetdev, le32(5)))))}, nil
	}))
	c.linkName = func(i int) string { return map[int]string{5: "eth1"}[i] }
	devs, err := c.SMCRDevices()
	if err != nil || len(devs) != 1 || devs[0].NetdevName != "eth1" {
		t.Fatalf("devs %+v err %v", devs, err)
	}
}

func TestFallbackStatsAndDumpRetry(t *testing.T) {
	calls := 0
	msg := genl(genCmdGetFbackStats, nest(genAttrFbackStats,
		nla(fbAttrType, []byte{0}), nla(fbAttrRsnCode, le32(0x03030000)), nla(fbAttrRsnCnt, le16(2))))
	f := newFake(func(s sent) ([][]byte, error) {
		calls++
		if calls == 1 {
			return nil, nl.ErrDumpInterrupted
		}
		return [][]byte{msg}, nil
	})
	c := newFakeClient(t, f)
	report, err := c.FallbackReport()
	got := report.Reasons
	if err != nil || !reflect.DeepEqual(got, []FallbackStat{{Reason: 0x03030000, Count: 2}}) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if calls != 2 || f.sent[1].cmd != genCmdGetFbackStats || f.sent[1].flags != unix.NLM_F_REQUEST|unix.NLM_F_DUMP {
		t.Fatalf("calls %d sent %+v", calls, f.sent)
	}
	f.handle = func(sent) ([][]byte, error) { return nil, nl.ErrDumpInterrupted }
	if _, err := c.FallbackReport(); !errors.Is(err, nl.ErrDumpInterrupted) {
		t.Fatalf("persistent interruption: %v", err)
	}
}
