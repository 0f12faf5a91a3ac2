package smc

import (
	"encoding/binary"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Test-side netlink framing, written from the kernel's layout rather than
// from nl.RtAttr: struct nlattr is {u16 nla_len; u16 nla_type} in host
// order (little endian here), nla_len counts the 4-byte header plus the
// payload but not the padding to the next 4-byte boundary; nla_nest_start
// sets NLA_F_NESTED (0x8000) in the type; nla_put_string includes the NUL.

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func cstr(s string) []byte { return append([]byte(s), 0) }

// nla frames one attribute and pads it to 4 bytes.
func nla(typ uint16, data []byte) []byte {
	b := append(le16(uint16(4+len(data))), le16(typ)...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nest frames children as a nested attribute (NLA_F_NESTED set).
func nest(typ uint16, children ...[]byte) []byte {
	var in []byte
	for _, c := range children {
		in = append(in, c...)
	}
	return nla(typ|0x8000, in)
}

// genl builds a genl message body: {cmd, version=1, reserved=0} + attrs.
func genl(cmd uint8, attrs ...[]byte) []byte {
	b := []byte{cmd, 1, 0, 0}
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

// kernelPnetMsg is what smc_pnet_dumpinfo/smc_pnet_set_nla emit for e.
func kernelPnetMsg(e PnetEntry) []byte {
	eth, ib, port := e.EthName, e.IBName, e.IBPort
	if e.IBName == "" {
		ib, port = "n/a", 0xff
	} else {
		eth = "n/a"
	}
	return genl(pnetCmdGet, nla(pnetAttrName, cstr(e.PnetID)), nla(pnetAttrEthName, cstr(eth)),
		nla(pnetAttrIBName, cstr(ib)), nla(pnetAttrIBPort, []byte{port}))
}

// familyReply is a CTRL_CMD_NEWFAMILY answer carrying only the id.
func familyReply(id uint16) [][]byte {
	return [][]byte{append([]byte{1 /* CTRL_CMD_NEWFAMILY */, 2, 0, 0}, nla(nl.GENL_CTRL_ATTR_FAMILY_ID, le16(id))...)}
}

// sent is one request as the fake saw it.
type sent struct {
	family  uint16
	flags   uint16
	cmd     uint8
	payload []byte
	attrs   []attr
}

// fakeTransport answers the genl controller and hands the rest to handle.
type fakeTransport struct {
	families map[string]uint16
	handle   func(s sent) ([][]byte, error)
	sent     []sent
	closed   bool
}

const (
	fakePnetID = 0x1c
	fakeGenID  = 0x1d
)

func newFake(handle func(s sent) ([][]byte, error)) *fakeTransport {
	return &fakeTransport{
		families: map[string]uint16{pnetFamilyName: fakePnetID, genFamilyName: fakeGenID},
		handle:   handle,
	}
}

func (f *fakeTransport) Execute(req *nl.NetlinkRequest) ([][]byte, error) {
	b := req.Serialize()
	s := sent{family: req.Type, flags: req.Flags, payload: b[unix.SizeofNlMsghdr:]}
	var err error
	s.cmd, s.attrs, err = parseGenl(s.payload)
	if err != nil {
		return nil, err
	}
	if s.family == unix.GENL_ID_CTRL {
		name := attrString(s.attrs[0].Data)
		id, ok := f.families[name]
		if !ok {
			return nil, unix.ENOENT
		}
		return familyReply(id), nil
	}
	f.sent = append(f.sent, s)
	return f.handle(s)
}

func (f *fakeTransport) Close() { f.closed = true }

// newFakeClient opens a Client over f.
func newFakeClient(t *testing.T, f *fakeTransport) *Client {
	t.Helper()
	if nl.NativeEndian() != binary.ByteOrder(binary.LittleEndian) {
		t.Skip("hand-written bytes are little endian")
	}
	c, err := newClient(f)
	if err != nil {
		t.Fatalf("newClient: %v", err)
	}
	return c
}

// attrOf returns the string value of attribute t in s, "" when absent.
func (s sent) attrOf(t uint16) string {
	for _, a := range s.attrs {
		if a.Type == t {
			return attrString(a.Data)
		}
	}
	return ""
}
