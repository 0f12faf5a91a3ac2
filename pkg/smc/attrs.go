package smc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink/nl"
)

// Generic netlink framing (include/uapi/linux/genetlink.h, netlink.h).
const (
	genlHdrLen  = 4      // struct genlmsghdr: cmd u8, version u8, reserved u16
	nlaHdrLen   = 4      // struct nlattr: len u16, type u16
	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

var errShort = errors.New("truncated netlink attribute")

// attr is one decoded netlink attribute.
type attr struct {
	Type uint16
	Data []byte
}

// genlPayload builds a genl message body: genlmsghdr then attributes. The
// header is written by hand: nl.Genlmsg.Serialize casts a 2-byte struct to
// 4 bytes and so sends 2 bytes of whatever follows it as "reserved".
func genlPayload(cmd, version uint8, attrs ...*nl.RtAttr) []byte {
	b := []byte{cmd, version, 0, 0}
	for _, a := range attrs {
		b = append(b, a.Serialize()...)
	}
	return b
}

// splitGenl returns the command and the attribute bytes of a genl message.
func splitGenl(msg []byte) (uint8, []byte, error) {
	if len(msg) < genlHdrLen {
		return 0, nil, fmt.Errorf("genl message of %d bytes: %w", len(msg), errShort)
	}
	return msg[0], msg[genlHdrLen:], nil
}

// parseAttrs decodes a flat attribute stream, masking the type flags.
func parseAttrs(b []byte) ([]attr, error) {
	var out []attr
	for len(b) > 0 {
		if len(b) < nlaHdrLen {
			return nil, errShort
		}
		l := int(nl.NativeEndian().Uint16(b[0:2]))
		if l < nlaHdrLen || l > len(b) {
			return nil, fmt.Errorf("attribute length %d of %d bytes: %w", l, len(b), errShort)
		}
		t := nl.NativeEndian().Uint16(b[2:4]) & nlaTypeMask
		out = append(out, attr{Type: t, Data: b[nlaHdrLen:l]})
		b = b[min(align4(l), len(b)):]
	}
	return out, nil
}

// parseGenl splits a genl message into its command and attributes.
func parseGenl(msg []byte) (uint8, []attr, error) {
	cmd, rest, err := splitGenl(msg)
	if err != nil {
		return 0, nil, err
	}
	attrs, err := parseAttrs(rest)
	return cmd, attrs, err
}

func align4(n int) int { return (n + 3) &^ 3 }

// Attribute value readers; wrong sizes decode as zero rather than panic.

func attrString(d []byte) string {
	if i := strings.IndexByte(string(d), 0); i >= 0 {
		d = d[:i]
	}
	return string(d)
}

func attrU8(d []byte) uint8 {
	if len(d) < 1 {
		return 0
	}
	return d[0]
}

func attrU16(d []byte) uint16 {
	if len(d) < 2 {
		return 0
	}
	return nl.NativeEndian().Uint16(d)
}

func attrU32(d []byte) uint32 {
	if len(d) < 4 {
		return 0
	}
	return nl.NativeEndian().Uint32(d)
}

func attrU64(d []byte) uint64 {
	if len(d) < 8 {
		return 0
	}
	return nl.NativeEndian().Uint64(d)
}

// nested returns the attributes inside the first attribute of type t.
func nested(attrs []attr, t uint16) ([]attr, bool, error) {
	for _, a := range attrs {
		if a.Type == t {
			in, err := parseAttrs(a.Data)
			return in, true, err
		}
	}
	return nil, false, nil
}
