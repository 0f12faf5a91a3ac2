package chain

import (
	"errors"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hook"
)

// kernelSMC opens an SMC netlink client per call in the netns asked for.
type kernelSMC struct{}

func (kernelSMC) EnsurePnet(nsPath string, e smc.PnetEntry) (got smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(c *smc.Client) (err error) {
		got, err = c.EnsurePnet(e)
		return err
	})
	return got, err
}

// RemovePnet treats a vanished netns as done: the kernel flushed its table.
func (kernelSMC) RemovePnet(nsPath string, e smc.PnetEntry) error {
	if nsPath != "" {
		err := ns.IsNSorErr(nsPath)
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		if errors.As(err, &notExist) || errors.As(err, &notNS) {
			return nil
		}
	}
	return smc.Do(nsPath, func(c *smc.Client) error { return c.RemovePnet(e) })
}

func (kernelSMC) PnetEntries(nsPath string) (list []smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(c *smc.Client) (err error) {
		list, err = c.PnetDump()
		return err
	})
	return list, err
}

func (kernelSMC) EnsureUEID(ueid string) error {
	return smc.Do("", func(c *smc.Client) error { return c.UEIDAdd(ueid) })
}

func (kernelSMC) TCP2SMC(nsPath string) (bool, error) { return smc.TCP2SMC(nsPath) }

func (kernelSMC) HookSupported(dir string) error { return hook.Hook{Dir: dir}.Supported() }

func (kernelSMC) HookAdd(dir string, ino uint64) error {
	return hook.Hook{Dir: dir}.Add(uint32(ino))
}

func (kernelSMC) HookRemove(dir string, ino uint64) error {
	return hook.Hook{Dir: dir}.Remove(uint32(ino))
}

func (kernelSMC) HookListed(dir string, ino uint64) (bool, error) {
	return hook.Hook{Dir: dir}.Listed(uint32(ino))
}
