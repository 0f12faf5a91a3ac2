package smc

import "fmt"

// SMC_GEN_NETLINK fallback statistics (include/uapi/linux/smc.h,
// net/smc/smc_stats.c smc_nl_get_fback_details).
const (
	genCmdGetFbackStats = 8 // SMC_NETLINK_GET_FBACK_STATS
	genAttrFbackStats   = 8 // SMC_GEN_FBACK_STATS, nest

	fbAttrType    = 1 // SMC_NLA_FBACK_STATS_TYPE, u8: 1 server, 0 client
	fbAttrSrvCnt  = 2 // SMC_NLA_FBACK_STATS_SRV_CNT, u64, first message only
	fbAttrClntCnt = 3 // SMC_NLA_FBACK_STATS_CLNT_CNT, u64, first message only
	fbAttrRsnCode = 4 // SMC_NLA_FBACK_STATS_RSN_CODE, u32
	fbAttrRsnCnt  = 5 // SMC_NLA_FBACK_STATS_RSN_CNT, u16
)

// FallbackStat counts fallbacks to TCP for one reason code (the kernel keeps
// the first SMC_MAX_FBACK_RSN_CNT distinct codes per side, each count a u16).
type FallbackStat struct {
	Server bool   // server side (listen) or client side (connect)
	Reason uint32 // SMC_CLC_DECL_* code, e.g. 0x03030000 no SMC device
	Count  uint64 // RSN_CNT (a u16 in the kernel)
}

// FallbackReport is the whole fallback dump of one netns.
type FallbackReport struct {
	ServerTotal uint64 // SRV_CNT: all server-side fallbacks
	ClientTotal uint64 // CLNT_CNT: all client-side fallbacks
	Reasons     []FallbackStat
}

// encodeFallbackDump is SMC_NETLINK_GET_FBACK_STATS (sent with NLM_F_DUMP).
func encodeFallbackDump() []byte { return genlPayload(genCmdGetFbackStats, familyVersion) }

// decodeFallback decodes the dump: one message per reason code, the totals
// only in the first message.
func decodeFallback(msgs [][]byte) (FallbackReport, error) {
	var r FallbackReport
	for _, m := range msgs {
		_, top, err := parseGenl(m)
		if err != nil {
			return FallbackReport{}, fmt.Errorf("decode fallback statistics: %w", err)
		}
		in, ok, err := nested(top, genAttrFbackStats)
		if err != nil {
			return FallbackReport{}, fmt.Errorf("decode fallback statistics: %w", err)
		}
		if ok {
			r.Reasons = append(r.Reasons, decodeFallbackNest(in, &r))
		}
	}
	return r, nil
}

// decodeFallbackNest reads one nest; PAD (type 0) is ignored.
func decodeFallbackNest(in []attr, r *FallbackReport) FallbackStat {
	var s FallbackStat
	for _, a := range in {
		switch a.Type {
		case fbAttrType:
			s.Server = attrU8(a.Data) != 0
		case fbAttrSrvCnt:
			r.ServerTotal = attrU64(a.Data)
		case fbAttrClntCnt:
			r.ClientTotal = attrU64(a.Data)
		case fbAttrRsnCode:
			s.Reason = attrU32(a.Data)
		case fbAttrRsnCnt:
			s.Count = uint64(attrU16(a.Data))
		}
	}
	return s
}

// FallbackReport reads this netns's fallback statistics (per netns: open
// the pod's netns for a pod). No CAP_NET_ADMIN needed.
func (c *Client) FallbackReport() (FallbackReport, error) {
	id, err := c.gen("read SMC fallback statistics")
	if err != nil {
		return FallbackReport{}, err
	}
	msgs, err := c.dump("read SMC fallback statistics", id, encodeFallbackDump())
	if err != nil {
		return FallbackReport{}, err
	}
	return decodeFallback(msgs)
}
