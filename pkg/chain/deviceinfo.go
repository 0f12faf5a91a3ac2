package chain

import (
	"errors"

	"github.com/rdma-chain/rdma-chain/internal/failpoint"
	"github.com/rdma-chain/rdma-chain/pkg/devinfo"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// publishDeviceInfo writes, when the runtime passed runtimeConfig
// CNIDeviceInfoFile, the NPWG device-info file of the pod's first RDMA
// device that has a PCI address, under the node lock. It is recorded
// before it is written, so DEL after a crash removes it; a file already
// there is someone else's (Multus copies a device plugin's file there) and
// is left as is. The file only informs: a failure to write it is logged
// and ADD goes on.
func (p *Plugin) publishDeviceInfo(c *call, draft *draftRecord, devs []rdma.Device) error {
	path := c.conf.RuntimeConfig.DeviceInfoFile
	if path == "" {
		return nil
	}
	i := firstWithPCI(devs)
	if i < 0 {
		c.log.Info("no device-info file written: the pod's RDMA devices have no PCI address", "path", path)
		return nil
	}
	// The folders Write will create are recorded with the file, before
	// either exists: DEL after a crash removes them when empty.
	dirs, err := devinfo.MissingDirs(path)
	if err != nil {
		c.log.Warn("cannot write the device-info file", "path", path, "error", err)
		return nil
	}
	di := &state.DeviceInfo{Path: path, Device: devs[i].Name, PCI: devs[i].PCI, Dirs: dirs}
	draft.DeviceInfo = di
	if err := p.save(c, draft); err != nil {
		return err
	}
	if _, err = devinfo.Write(path, devinfo.Content(di.PCI, di.Device)); err != nil {
		// Forgotten in the record before ADD goes on: were ADD to fail
		// later, its undo must not touch a file it did not write.
		draft.DeviceInfo = nil
		logUnwritten(c, path, dirs, err)
		return p.save(c, draft)
	}
	failpoint.Hit("add-device-info-written")
	return nil
}

// logUnwritten removes the folders ADD created for a device-info file it
// could not write and says why it is not there.
func logUnwritten(c *call, path string, dirs []string, err error) {
	if rerr := devinfo.RemoveDirs(dirs); rerr != nil {
		c.log.Warn("cannot remove the device-info folders ADD created", "error", rerr)
	}
	if errors.Is(err, devinfo.ErrExists) {
		c.log.Info("device-info file already there: left as is", "path", path)
		return
	}
	c.log.Warn("cannot write the device-info file", "path", path, "error", err)
}

func firstWithPCI(devs []rdma.Device) int {
	for i, d := range devs {
		if d.PCI != "" {
			return i
		}
	}
	return -1
}

// removeDeviceInfo removes the recorded device-info file while it holds
// what the plugin wrote for the recorded device (read from disk, the
// record cannot name another file to remove), and the folders ADD created
// for it that are empty. The file only informs: one that cannot be removed
// (its folder replaced by a file, a read-only file system, a path a record
// should not hold) is logged and forgotten, like an unreleasable lease,
// and never fails DEL or GC.
func removeDeviceInfo(c *call, di *state.DeviceInfo) {
	if err := devinfo.Remove(di.Path, devinfo.Content(di.PCI, di.Device), di.Dirs); err != nil {
		c.log.Warn("cannot remove the device-info file: forgotten", "path", di.Path, "error", err)
	}
}
