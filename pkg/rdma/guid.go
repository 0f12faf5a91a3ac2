package rdma

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// GUIDFromMAC returns the EUI-64 node GUID the eRDMA (and rxe) drivers derive
// from a 6-byte MAC: first byte XOR 0x02, ff:fe inserted in the middle, in
// the "xxxx:xxxx:xxxx:xxxx" format of sysfs node_guid.
func GUIDFromMAC(mac net.HardwareAddr) (string, error) {
	if len(mac) != 6 {
		return "", fmt.Errorf("GUID from MAC %q: need 6 bytes, got %d", mac.String(), len(mac))
	}
	b := []byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return formatGUID(b), nil
}

// MACFromGUID reverses GUIDFromMAC. It fails when guid is not in the sysfs
// node_guid format or its middle bytes are not ff:fe.
func MACFromGUID(guid string) (net.HardwareAddr, error) {
	b, err := parseGUID(guid)
	if err != nil {
		return nil, err
	}
	if b[3] != 0xff || b[4] != 0xfe {
		return nil, fmt.Errorf("GUID %q is not an EUI-64 of a MAC (middle is %02x:%02x, want ff:fe)", guid, b[3], b[4])
	}
	return net.HardwareAddr{b[0] ^ 0x02, b[1], b[2], b[5], b[6], b[7]}, nil
}

// parseGUID parses "xxxx:xxxx:xxxx:xxxx" into 8 bytes.
func parseGUID(guid string) ([]byte, error) {
	groups := strings.Split(strings.TrimSpace(guid), ":")
	if len(groups) != 4 {
		return nil, fmt.Errorf("malformed GUID %q: want xxxx:xxxx:xxxx:xxxx", guid)
	}
	out := make([]byte, 0, 8)
	for _, g := range groups {
		b, err := hex.DecodeString(g)
		if err != nil || len(g) != 4 {
			return nil, fmt.Errorf("malformed GUID %q: want xxxx:xxxx:xxxx:xxxx", guid)
		}
		out = append(out, b...)
	}
	return out, nil
}

// formatGUID formats 8 bytes as sysfs prints node_guid.
func formatGUID(b []byte) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

// guidFromNetlink converts vishvananda/netlink's NodeGuid string to the
// sysfs format. The library prints the kernel's host-order u64 as
// little-endian bytes ("03:02:01:fe:ff:3e:16:02"), i.e. the GUID reversed.
func guidFromNetlink(s string) string {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 8 {
		return ""
	}
	b := make([]byte, 8)
	for i := range hw {
		b[7-i] = hw[i]
	}
	return formatGUID(b)
}
