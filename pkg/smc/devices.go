package smc

import (
	"fmt"
	"strings"
)

// SMC_GEN_NETLINK device dump (include/uapi/linux/smc.h, net/smc/smc_ib.c
// smc_nl_handle_smcr_dev and smc_nl_handle_dev_port).
const (
	genCmdGetDevSMCR = 6 // SMC_NETLINK_GET_DEV_SMCR
	genAttrDevSMCR   = 6 // SMC_GEN_DEV_SMCR, nest

	devAttrIsCrit = 2  // SMC_NLA_DEV_IS_CRIT, u8
	devAttrPCIID  = 7  // SMC_NLA_DEV_PCI_ID, string
	devAttrPort   = 8  // SMC_NLA_DEV_PORT, nest (port 1)
	devAttrPort2  = 9  // SMC_NLA_DEV_PORT2, nest (port 2)
	devAttrIBName = 10 // SMC_NLA_DEV_IB_NAME, string

	portAttrPnetUsr = 1 // SMC_NLA_DEV_PORT_PNET_USR, u8
	portAttrPnetID  = 2 // SMC_NLA_DEV_PORT_PNETID, string
	portAttrNetdev  = 3 // SMC_NLA_DEV_PORT_NETDEV, u32 ifindex
	portAttrState   = 4 // SMC_NLA_DEV_PORT_STATE, u8 (1: active)
	portAttrValid   = 5 // SMC_NLA_DEV_PORT_VALID, u8
	portAttrLnkCnt  = 6 // SMC_NLA_DEV_PORT_LNK_CNT, u32
)

// SMCRDevice is one valid port of an RDMA device the smc module uses.
type SMCRDevice struct {
	Name        string // RDMA device name
	Port        int    // 1 or 2
	PCIID       string // PCI address of the parent device, "" without one
	Critical    bool   // the last link of some link group runs over it
	PnetID      string // port PNETID, "" when none
	PnetByUser  bool   // PNETID comes from the pnet table (not hardware)
	NetdevIndex int    // ifindex of the port's netdev, 0 when unknown
	NetdevName  string // resolved in the Client's netns, "" when not there
	Active      bool   // port state active
	LinkCount   uint32 // SMC-R links over this port
}

// encodeDevSMCRDump is SMC_NETLINK_GET_DEV_SMCR (sent with NLM_F_DUMP).
func encodeDevSMCRDump() []byte { return genlPayload(genCmdGetDevSMCR, familyVersion) }

// decodeDevSMCR flattens the dump into one SMCRDevice per port.
func decodeDevSMCR(msgs [][]byte) ([]SMCRDevice, error) {
	var out []SMCRDevice
	for _, m := range msgs {
		devs, err := decodeDevMsg(m)
		if err != nil {
			return nil, fmt.Errorf("decode SMC-R device: %w", err)
		}
		out = append(out, devs...)
	}
	return out, nil
}

// decodeDevMsg decodes one message: SMC_GEN_DEV_SMCR{device attrs, ports}.
func decodeDevMsg(msg []byte) ([]SMCRDevice, error) {
	_, top, err := parseGenl(msg)
	if err != nil {
		return nil, err
	}
	in, ok, err := nested(top, genAttrDevSMCR)
	if err != nil || !ok {
		return nil, err
	}
	var base SMCRDevice
	var ports []SMCRDevice
	for _, a := range in {
		switch a.Type {
		case devAttrIsCrit:
			base.Critical = attrU8(a.Data) != 0
		case devAttrPCIID:
			base.PCIID = attrString(a.Data)
		case devAttrIBName:
			base.Name = attrString(a.Data)
		case devAttrPort, devAttrPort2:
			p, err := decodePort(a.Data, int(a.Type-devAttrPort)+1)
			if err != nil {
				return nil, err
			}
			ports = append(ports, p)
		}
	}
	for i := range ports {
		ports[i].Name, ports[i].PCIID, ports[i].Critical = base.Name, base.PCIID, base.Critical
	}
	return ports, nil
}

// decodePort decodes the SMC_NLA_DEV_PORT* nest of port number port.
func decodePort(b []byte, port int) (SMCRDevice, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return SMCRDevice{}, err
	}
	d := SMCRDevice{Port: port}
	for _, a := range attrs {
		switch a.Type {
		case portAttrPnetUsr:
			d.PnetByUser = attrU8(a.Data) != 0
		case portAttrPnetID:
			d.PnetID = strings.TrimRight(attrString(a.Data), " ")
		case portAttrNetdev:
			d.NetdevIndex = int(attrU32(a.Data))
		case portAttrState:
			d.Active = attrU8(a.Data) != 0
		case portAttrLnkCnt:
			d.LinkCount = attrU32(a.Data)
		}
	}
	return d, nil
}

// SMCRDevices lists the RDMA device ports known to the smc module (global,
// any netns). NetdevName is filled when the ifindex exists in the Client's
// netns.
func (c *Client) SMCRDevices() ([]SMCRDevice, error) {
	id, err := c.gen("dump SMC-R devices")
	if err != nil {
		return nil, err
	}
	msgs, err := c.dump("dump SMC-R devices", id, encodeDevSMCRDump())
	if err != nil {
		return nil, err
	}
	devs, err := decodeDevSMCR(msgs)
	if err != nil {
		return nil, err
	}
	for i := range devs {
		if devs[i].NetdevIndex > 0 {
			devs[i].NetdevName = c.linkName(devs[i].NetdevIndex)
		}
	}
	return devs, nil
}
