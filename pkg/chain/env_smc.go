package chain

import (
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// kernelSMC opens an SMC netlink client per call in the netns asked for.
type kernelSMC struct{}

func (kernelSMC) EnsurePnet(nsPath string, e smc.PnetEntry) (got smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		got, err = client.EnsurePnet(e)
		return err
	})
	return got, err
}

// RemovePnet treats a vanished netns as done: the kernel flushed its table.
func (kernelSMC) RemovePnet(nsPath string, e smc.PnetEntry) error {
	if nsPath != "" {
		if gone, err := netnsid.Gone(nsPath); gone || err != nil {
			return err
		}
	}
	return smc.Do(nsPath, func(client *smc.Client) error { return client.RemovePnet(e) })
}

func (kernelSMC) PnetEntries(nsPath string) (list []smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		list, err = client.PnetDump()
		return err
	})
	return list, err
}

func (kernelSMC) EnsureUEID(ueid string) error {
	return smc.Do("", func(client *smc.Client) error { return client.UEIDAdd(ueid) })
}

func (kernelSMC) TCP2SMC(nsPath string) (bool, error) { return smc.TCP2SMC(nsPath) }

// The socket hook: the plugin lists, unlists and looks up a pod's netns in
// the node's pinned map itself (raw bpf(2)); the hook binary beside it
// (rdma-chain-smc-hook), which links cilium/ebpf, runs only to probe a node
// with nothing pinned, to load and attach the program and to detach it.

func hook() hookcmd.Client { return hookcmd.Client{Runner: hookcmd.Beside()} }

func (kernelSMC) HookSupported(dir string) error { return hook().Supported(dir) }

func (kernelSMC) HookAdd(dir string, ino uint64) (bool, error) { return hook().Add(dir, ino) }

func (kernelSMC) HookRemove(dir string, ino uint64) error { return hook().Remove(dir, ino) }

func (kernelSMC) HookListed(dir string, ino uint64) (bool, error) { return hook().Listed(dir, ino) }

func (kernelSMC) Offer(dir string) smc.Offer {
	return smc.Detect(func() error { return hook().Supported(dir) })
}
