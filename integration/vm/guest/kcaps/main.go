// Command kcaps prints what the running kernel offers this plugin, as
// "RC-CAP KEY VALUE" lines the VM tier compares with the kernel table of
// docs/kernels.md (the RDMA netns operations are probed by the caps
// scenario itself, with rdma(8)):
//
//	smc          yes|no   AF_SMC sockets (the smc module)
//	tcp2smc      yes|no   the net.smc.tcp2smc sysctl (Alibaba Cloud Linux 3)
//	ipproto_smc  yes|no   socket(AF_INET, SOCK_STREAM, IPPROTO_SMC)
//	socket_hook  yes|no   the plugin's BPF socket hook can run (pkg/smc/hook.Supported)
//	hs_ctrl      yes|no   the net.smc.hs_ctrl sysctl (smc_hs_ctrl, Linux >= 6.19)
//	netns_local  ethtool|netlink|ethtool+netlink|none
//	                      how the kernel reports that lo cannot change netns:
//	                      the ethtool feature "netns-local" (NETIF_F_NETNS_LOCAL)
//	                      and/or the link attribute IFLA_NETNS_IMMUTABLE
//
// The SMC keys are pkg/smc.Detect's Offer, the detection the plugin's
// STATUS, inspect and the metrics use; "RC-INFO transparent M" is the
// mechanism smcr.transparent auto picks from it, which the caps scenario
// compares with theirs. A probe that cannot tell (an unexpected error)
// prints the error as the value, which no table row matches. Exit status:
// 0, or 2 on usage.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hook"
)

// iflaNetnsImmutable is IFLA_NETNS_IMMUTABLE (include/uapi/linux/if_link.h,
// after IFLA_MAX_PACING_OFFLOAD_HORIZON): not in x/sys/unix yet.
const iflaNetnsImmutable = 0x43

func main() {
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: kcaps")
		os.Exit(2)
	}
	o := smc.Detect(hook.Supported)
	caps := []struct{ key, value string }{
		{"smc", yesNo(o.SMC)},
		{"tcp2smc", yesNo(o.TCP2SMC)},
		{"ipproto_smc", yesNo(o.IPPROTOSMC)},
		{"socket_hook", yesNo(o.SocketHook)},
		{"hs_ctrl", yesNo(o.HSCtrl)},
		{"netns_local", netnsLocal("lo")},
	}
	for _, c := range caps {
		fmt.Printf("RC-CAP %s %s\n", c.key, c.value)
	}
	// The mechanism smcr.transparent auto picks: the caps scenario checks
	// that STATUS, inspect and the metrics name the same one.
	fmt.Printf("RC-INFO transparent %s\n", o.Uses(config.TransparentAuto))
	if o.SocketHookError != "" {
		fmt.Printf("RC-INFO socket hook: %s\n", o.SocketHookError)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// netnsLocal says through which interfaces the kernel reports name as
// netns-local.
func netnsLocal(name string) string {
	var how []string
	why, err := netdev.NetnsLocal(name)
	if err != nil {
		return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	if why != "" {
		how = append(how, "ethtool")
	}
	imm, err := netnsImmutable(name)
	if err != nil {
		return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	if imm {
		how = append(how, "netlink")
	}
	if len(how) == 0 {
		return "none"
	}
	return strings.Join(how, "+")
}

// netnsImmutable reads IFLA_NETNS_IMMUTABLE of link name: false when the
// kernel does not send the attribute.
func netnsImmutable(name string) (bool, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return false, fmt.Errorf("RTM_GETLINK %s: %w", name, err)
	}
	if len(msgs) != 1 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return false, errors.New("RTM_GETLINK: unexpected answer")
	}
	attrs, err := nl.ParseRouteAttr(msgs[0][unix.SizeofIfInfomsg:])
	if err != nil {
		return false, fmt.Errorf("RTM_GETLINK attributes: %w", err)
	}
	for _, a := range attrs {
		if a.Attr.Type == iflaNetnsImmutable {
			return len(a.Value) > 0 && a.Value[0] != 0, nil
		}
	}
	return false, nil
}
