package smc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink/nl"
)

// SMC_GEN_NETLINK UEID commands (include/uapi/linux/smc.h, net/smc/smc_clc.c).
const (
	genCmdDumpUEID = 9  // SMC_NETLINK_DUMP_UEID
	genCmdAddUEID  = 10 // SMC_NETLINK_ADD_UEID, GENL_ADMIN_PERM
	ueidAttrEntry  = 1  // SMC_NLA_EID_TABLE_ENTRY, string
	maxEIDLen      = 32 // SMC_MAX_EID_LEN
)

// padUEID returns the form the kernel stores (smc_nl_add_ueid takes exactly
// 32 characters plus NUL): upper case, as smc-tools sends it (the kernel
// refuses lower case), blank-padded to 32. The characters are checked once,
// in pkg/config; the kernel answers EINVAL to anything that slips past.
func padUEID(s string) string {
	u := strings.ToUpper(strings.TrimRight(s, " "))
	return u + strings.Repeat(" ", max(0, maxEIDLen-len(u)))
}

// encodeUEID is cmd{SMC_NLA_EID_TABLE_ENTRY = 32 padded bytes + NUL}.
func encodeUEID(cmd uint8, padded string) []byte {
	return genlPayload(cmd, familyVersion, nl.NewRtAttr(ueidAttrEntry, nl.ZeroTerminated(padded)))
}

// encodeUEIDDump is SMC_NETLINK_DUMP_UEID (sent with NLM_F_DUMP).
func encodeUEIDDump() []byte { return genlPayload(genCmdDumpUEID, familyVersion) }

// decodeUEIDs returns the dumped UEIDs without their padding.
func decodeUEIDs(msgs [][]byte) ([]string, error) {
	var out []string
	for _, m := range msgs {
		_, attrs, err := parseGenl(m)
		if err != nil {
			return nil, fmt.Errorf("decode UEID table: %w", err)
		}
		for _, a := range attrs {
			if a.Type == ueidAttrEntry {
				out = append(out, strings.TrimRight(attrString(a.Data), " "))
			}
		}
	}
	return out, nil
}

// UEIDAdd adds a user EID to the kernel's global table (at most 4 entries,
// ERANGE when full). An existing UEID is not an error.
func (c *Client) UEIDAdd(ueid string) error {
	id, err := c.gen("add UEID " + ueid)
	if err != nil {
		return err
	}
	err = c.do("add UEID "+ueid, id, encodeUEID(genCmdAddUEID, padUEID(ueid)))
	if errors.Is(err, ErrExists) {
		return nil
	}
	return err
}

// UEIDs lists the global UEID table, padding trimmed.
func (c *Client) UEIDs() ([]string, error) {
	id, err := c.gen("dump UEID table")
	if err != nil {
		return nil, err
	}
	msgs, err := c.dump("dump UEID table", id, encodeUEIDDump())
	if err != nil {
		return nil, err
	}
	return decodeUEIDs(msgs)
}
