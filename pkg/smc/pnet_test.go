package smc

import (
	"bytes"
	"reflect"
	"testing"
)

// TestEncodePnet checks requests against bytes derived by hand from
// net/smc/smc_pnet.c's policy: genlmsghdr {cmd, version 1, 0, 0};
// SMC_PNETID_NAME/ETHNAME/IBNAME are NLA_NUL_STRING (NUL included in
// nla_len), IBPORT is NLA_U8 (nla_len 5, padded to 8). Example: NAME "NET1"
// = len 4+5=9 (09 00), type 1 (01 00), "NET1\0", 3 pad bytes.
func TestEncodePnet(t *testing.T) {
	name := []byte{0x09, 0x00, 0x01, 0x00, 'N', 'E', 'T', '1', 0, 0, 0, 0}
	tests := []struct {
		name string
		got  []byte
		want [][]byte
	}{
		{"add eth", encodePnetAdd(PnetEntry{PnetID: "NET1", EthName: "eth0"}), [][]byte{
			{0x02, 0x01, 0x00, 0x00}, name,
			{0x09, 0x00, 0x02, 0x00, 'e', 't', 'h', '0', 0, 0, 0, 0},
		}},
		{"add ib port 1", encodePnetAdd(PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 1}), [][]byte{
			{0x02, 0x01, 0x00, 0x00}, name,
			{0x09, 0x00, 0x03, 0x00, 'r', 'x', 'e', '0', 0, 0, 0, 0},
			{0x05, 0x00, 0x04, 0x00, 0x01, 0, 0, 0},
		}},
		{"add ib default port", encodePnetAdd(PnetEntry{PnetID: "NET1", IBName: "erdma_0"}), [][]byte{
			{0x02, 0x01, 0x00, 0x00}, name,
			{0x0c, 0x00, 0x03, 0x00, 'e', 'r', 'd', 'm', 'a', '_', '0', 0},
		}},
		{"del", encodePnetDel("NET1"), [][]byte{{0x03, 0x01, 0x00, 0x00}, name}},
		{"dump", encodePnetDump(), [][]byte{{0x01, 0x01, 0x00, 0x00}}},
		{"getfamily", encodeGetFamily("SMC_PNETID"), [][]byte{
			{0x03, 0x02, 0x00, 0x00}, // CTRL_CMD_GETFAMILY, ctrl version 2
			{0x0f, 0x00, 0x02, 0x00, 'S', 'M', 'C', '_', 'P', 'N', 'E', 'T', 'I', 'D', 0, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if want := bytes.Join(tt.want, nil); !bytes.Equal(tt.got, want) {
				t.Fatalf("bytes\n got % x\nwant % x", tt.got, want)
			}
		})
	}
}

// ethDumpMsg is a literal SMC_PNETID_GET dump message for an ETH entry,
// as smc_pnet_set_nla builds it: NAME, ETHNAME, IBNAME "n/a", IBPORT
// 0xff.
var ethDumpMsg = []byte{
	0x01, 0x01, 0x00, 0x00,
	0x09, 0x00, 0x01, 0x00, 'N', 'E', 'T', '1', 0, 0, 0, 0,
	0x09, 0x00, 0x02, 0x00, 'e', 't', 'h', '0', 0, 0, 0, 0,
	0x08, 0x00, 0x03, 0x00, 'n', '/', 'a', 0,
	0x05, 0x00, 0x04, 0x00, 0xff, 0, 0, 0,
}

func TestDecodePnetDump(t *testing.T) {
	tests := []struct {
		name string
		msgs [][]byte
		want []PnetEntry
	}{
		{"literal eth entry", [][]byte{ethDumpMsg}, []PnetEntry{{PnetID: "NET1", EthName: "eth0"}}},
		{"ib entry", [][]byte{kernelPnetMsg(PnetEntry{PnetID: "NET1", IBName: "rxe0", IBPort: 2})},
			[]PnetEntry{{PnetID: "NET1", IBName: "rxe0", IBPort: 2}}},
		{"several messages", [][]byte{
			kernelPnetMsg(PnetEntry{PnetID: "A1", EthName: "eth0"}),
			kernelPnetMsg(PnetEntry{PnetID: "B2", IBName: "erdma_0", IBPort: 1}),
			kernelPnetMsg(PnetEntry{PnetID: "C3", EthName: "net1"}),
		}, []PnetEntry{
			{PnetID: "A1", EthName: "eth0"},
			{PnetID: "B2", IBName: "erdma_0", IBPort: 1},
			{PnetID: "C3", EthName: "net1"},
		}},
		{"empty table", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodePnetDump(tt.msgs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodePnetTruncated(t *testing.T) {
	for _, msg := range [][]byte{ethDumpMsg[:2], ethDumpMsg[:10], append([]byte{}, ethDumpMsg[:6]...)} {
		if _, err := decodePnetDump([][]byte{msg}); err == nil {
			t.Errorf("% x: want error", msg)
		}
	}
}

func TestKernelHelperMatchesLiteral(t *testing.T) {
	if got := kernelPnetMsg(PnetEntry{PnetID: "NET1", EthName: "eth0"}); !bytes.Equal(got, ethDumpMsg) {
		t.Fatalf("test framing helper drifted:\n got % x\nwant % x", got, ethDumpMsg)
	}
}

func TestValidPnetID(t *testing.T) {
	tests := map[string]bool{
		"NET1": true, "net1": true, "A": true, "0123456789ABCDEF": true,
		"": false, "0123456789ABCDEFG": false, "NET-1": false, "NET 1": false, "Ä": false, " A": false,
	}
	for in, want := range tests {
		if got := ValidPnetID(in); got != want {
			t.Errorf("ValidPnetID(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestPnetIDFromMAC(t *testing.T) {
	mac := []byte{0x00, 0x16, 0x3e, 0x0a, 0xbc, 0xde}
	if got := PnetIDFromMAC(mac); got != "00163E0ABCDE" || !ValidPnetID(got) {
		t.Fatalf("got %q", got)
	}
}
