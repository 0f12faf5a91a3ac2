package smc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// SMC_PNETID commands and attributes (include/uapi/linux/smc.h).
const (
	pnetCmdGet = 1 // SMC_PNETID_GET
	pnetCmdAdd = 2 // SMC_PNETID_ADD
	pnetCmdDel = 3 // SMC_PNETID_DEL

	pnetAttrName    = 1 // SMC_PNETID_NAME, NLA_NUL_STRING
	pnetAttrEthName = 2 // SMC_PNETID_ETHNAME, NLA_NUL_STRING
	pnetAttrIBName  = 3 // SMC_PNETID_IBNAME, NLA_NUL_STRING
	pnetAttrIBPort  = 4 // SMC_PNETID_IBPORT, NLA_U8

	pnetNA     = "n/a" // smc_pnet_set_nla's placeholder for the other kind
	pnetPortNA = 0xff  // IBPORT of an ETH entry
)

// encodePnetAdd is SMC_PNETID_ADD{NAME, ETHNAME | IBNAME [, IBPORT]}. An IB
// port of 0 is left out: the kernel then uses port 1.
func encodePnetAdd(e PnetEntry) []byte {
	attrs := []*nl.RtAttr{nl.NewRtAttr(pnetAttrName, nl.ZeroTerminated(e.PnetID))}
	if e.EthName != "" {
		attrs = append(attrs, nl.NewRtAttr(pnetAttrEthName, nl.ZeroTerminated(e.EthName)))
	}
	if e.IBName != "" {
		attrs = append(attrs, nl.NewRtAttr(pnetAttrIBName, nl.ZeroTerminated(e.IBName)))
		if e.IBPort != 0 {
			attrs = append(attrs, nl.NewRtAttr(pnetAttrIBPort, nl.Uint8Attr(e.IBPort)))
		}
	}
	return genlPayload(pnetCmdAdd, familyVersion, attrs...)
}

// encodePnetDel is SMC_PNETID_DEL{NAME}.
func encodePnetDel(pnetID string) []byte {
	return genlPayload(pnetCmdDel, familyVersion, nl.NewRtAttr(pnetAttrName, nl.ZeroTerminated(pnetID)))
}

// encodePnetDump is SMC_PNETID_GET without attributes (sent with NLM_F_DUMP).
func encodePnetDump() []byte { return genlPayload(pnetCmdGet, familyVersion) }

// decodePnetDump turns the dump (one message per entry) into entries.
func decodePnetDump(msgs [][]byte) ([]PnetEntry, error) {
	var out []PnetEntry
	for _, m := range msgs {
		e, err := decodePnetEntry(m)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// decodePnetEntry decodes one SMC_PNETID_GET message; "n/a" and port 255
// become empty values.
func decodePnetEntry(msg []byte) (PnetEntry, error) {
	_, attrs, err := parseGenl(msg)
	if err != nil {
		return PnetEntry{}, fmt.Errorf("decode pnet entry: %w", err)
	}
	var e PnetEntry
	for _, a := range attrs {
		switch a.Type {
		case pnetAttrName:
			e.PnetID = strings.TrimRight(attrString(a.Data), " ")
		case pnetAttrEthName:
			e.EthName = naToEmpty(attrString(a.Data))
		case pnetAttrIBName:
			e.IBName = naToEmpty(attrString(a.Data))
		case pnetAttrIBPort:
			e.IBPort = attrU8(a.Data)
		}
	}
	if e.IBName == "" || e.IBPort == pnetPortNA {
		e.IBPort = 0
	}
	return e, nil
}

func naToEmpty(s string) string {
	if s == pnetNA {
		return ""
	}
	return s
}

// PnetAdd adds one entry to this netns's pnet table. EEXIST (the netdev
// already has an entry with any PNETID, or the IB port already has a
// PNETID) is returned wrapping ErrExists.
func (c *Client) PnetAdd(e PnetEntry) error {
	e.PnetID = strings.ToUpper(e.PnetID)
	return c.do("add pnet entry "+e.String(), c.pnetID, encodePnetAdd(e))
}

// PnetDel removes every entry of pnetID in this netns; in init_net the kernel
// also clears that user-defined PNETID from every RDMA device port. A
// PNETID with nothing to remove (ENOENT) is not an error.
func (c *Client) PnetDel(pnetID string) error {
	err := c.do("delete pnet entries of "+pnetID, c.pnetID, encodePnetDel(strings.ToUpper(pnetID)))
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// PnetDump lists this netns's table (outside init_net: ETH entries only).
func (c *Client) PnetDump() ([]PnetEntry, error) {
	msgs, err := c.dump("dump pnet table", c.pnetID, encodePnetDump())
	if err != nil {
		return nil, err
	}
	return decodePnetDump(msgs)
}
