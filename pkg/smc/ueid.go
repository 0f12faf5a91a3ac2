package smc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// SMC_GEN_NETLINK UEID commands (include/uapi/linux/smc.h, net/smc/smc_clc.c).
const (
	genCmdDumpUEID   = 9  // SMC_NETLINK_DUMP_UEID
	genCmdAddUEID    = 10 // SMC_NETLINK_ADD_UEID, GENL_ADMIN_PERM
	genCmdRemoveUEID = 11 // SMC_NETLINK_REMOVE_UEID, GENL_ADMIN_PERM
	ueidAttrEntry    = 1  // SMC_NLA_EID_TABLE_ENTRY, string
	maxEIDLen        = 32 // SMC_MAX_EID_LEN
)

// NormalizeUEID returns the 32-byte blank-padded form the kernel stores.
//
// Kernel rules (smc_clc_ueid_valid, smc_nl_add_ueid): the attribute holds
// exactly 32 characters plus NUL; characters are A-Z, 0-9, '.' and '-';
// the first is A-Z or 0-9; blanks only as trailing padding; lower case is
// rejected (this function upper-cases first, as smc-tools does).
func NormalizeUEID(s string) (string, error) {
	u := strings.ToUpper(strings.TrimRight(s, " "))
	if u == "" || len(u) > maxEIDLen {
		return "", fmt.Errorf("smc: invalid UEID %q: need 1-%d characters", s, maxEIDLen)
	}
	if !isAlnum(u[0]) {
		return "", fmt.Errorf("smc: invalid UEID %q: must start with A-Z or 0-9", s)
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; !isAlnum(c) && c != '.' && c != '-' {
			return "", fmt.Errorf("smc: invalid UEID %q: only A-Z, 0-9, '.' and '-' allowed", s)
		}
	}
	return u + strings.Repeat(" ", maxEIDLen-len(u)), nil
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
			return nil, fmt.Errorf("smc: decode UEID: %w", err)
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
	id, err := c.gen("UEID add")
	if err != nil {
		return err
	}
	padded, err := NormalizeUEID(ueid)
	if err != nil {
		return err
	}
	err = c.do("UEID add "+ueid, id, encodeUEID(genCmdAddUEID, padded))
	if errors.Is(err, ErrExists) {
		return nil
	}
	return err
}

// UEIDDel removes a user EID; a missing one (ENOENT) is not an error, nor is
// s390's EAGAIN (removed, system EID re-enabled).
func (c *Client) UEIDDel(ueid string) error {
	id, err := c.gen("UEID remove")
	if err != nil {
		return err
	}
	padded, err := NormalizeUEID(ueid)
	if err != nil {
		return err
	}
	err = c.do("UEID remove "+ueid, id, encodeUEID(genCmdRemoveUEID, padded))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAGAIN) {
		return nil
	}
	return err
}

// UEIDs lists the global UEID table, padding trimmed.
func (c *Client) UEIDs() ([]string, error) {
	id, err := c.gen("UEID dump")
	if err != nil {
		return nil, err
	}
	msgs, err := c.dump("UEID dump", id, encodeUEIDDump())
	if err != nil {
		return nil, err
	}
	return decodeUEIDs(msgs)
}
