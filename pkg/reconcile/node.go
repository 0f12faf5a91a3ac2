package reconcile

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/cri"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// kernelNode is the node the command runs on: CRI at the socket, the
// plugin's own DEL, the kernel.
type kernelNode struct {
	env    chain.Env
	plugin *chain.Plugin
	rdma   *rdma.System
}

// newKernelNode runs the plugin's DEL with its log lines on stderr.
func newKernelNode(stderr io.Writer) kernelNode {
	env := chain.KernelEnv()
	env.Stderr = stderr
	return kernelNode{env: env, plugin: chain.New(env), rdma: rdma.New()}
}

func (kernelNode) Sandboxes(ctx context.Context, criSocket string) ([]cri.Sandbox, error) {
	return cri.List(ctx, criSocket)
}

func (k kernelNode) NetnsGone(rec *state.Record) (bool, error) { return rec.NetnsGone(k.env.Netns.ID) }

func (k kernelNode) NetnsReplaced(rec *state.Record) (bool, error) {
	return rec.NetnsReplaced(k.env.Netns.ID)
}

func (k kernelNode) Del(args *skel.CmdArgs) error { return k.plugin.Del(args) }

func (kernelNode) Now() time.Time { return time.Now() }

// Stranded says why rec is a stranded exclusive-mode attachment: it
// holds a device, its pod netns is gone (as ADD's reclaim decides, by the
// path, its inode and its cookie) and the kernel shows a refunded device in
// this netns (the RDMA device, or a netdev with the moved NIC's MAC). Both
// must hold: a netns path this process cannot see (a mount it lacks) never
// releases a live pod, since that pod's device is not back.
func (k kernelNode) Stranded(rec *state.Record) (string, error) {
	if !chain.HoldsDevice(rec) {
		return "", nil
	}
	gone, err := k.NetnsGone(rec)
	if err != nil || !gone {
		return "", err
	}
	for _, l := range rec.Links {
		if l.Kind != state.LinkMoved {
			continue
		}
		if k.rdma.Visible(l.Device) {
			return fmt.Sprintf("netns %s is gone and RDMA device %s is back on the host", rec.NetNS, l.Device), nil
		}
		if l.MAC == "" {
			continue
		}
		names, err := netdev.LinksWithMAC(l.MAC)
		if err != nil {
			return "", err
		}
		if len(names) > 0 {
			return fmt.Sprintf("netns %s is gone and its NIC %s is back on the host as %s", rec.NetNS, l.MAC, names[0]), nil
		}
	}
	return "", nil
}

// Watch starts the event sources: rtnetlink link events of this
// netns (a refunded NIC appears here when its pod netns dies) and the RDMA
// netlink monitor where the kernel has it. A source that fails is said
// once; the --interval pass remains the safety net.
func (kernelNode) Watch(ctx context.Context, sink eventSink) {
	sink.sourceUp("rtnetlink", netdev.WatchLinks(ctx, func() { sink.fire("rtnetlink") }),
		"cannot listen to link events: repairs wait for the next pass")
	sink.sourceUp("rdma", rdma.Monitor(ctx, func() { sink.fire("rdma") }), "no RDMA monitor: repairs of RDMA devices wait for a link event or the next pass")
}
