package smc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/containernetworking/plugins/pkg/ns"
)

// tcp2smcPath is Alibaba Cloud Linux 3's per-netns switch that turns new TCP
// sockets into SMC sockets. Upstream kernels and Alibaba Cloud Linux 4 do
// not have it.
const tcp2smcPath = "/proc/sys/net/smc/tcp2smc"

// TCP2SMC sets net.smc.tcp2smc=1 in the netns at nsPath. It returns
// (false, nil) when the sysctl does not exist there, (true, nil) once set.
// The file is opened from a thread inside that netns because procfs net
// sysctls resolve to the opener's netns.
func TCP2SMC(nsPath string) (bool, error) {
	return setNetnsSysctl(nsPath, tcp2smcPath, "1")
}

// setNetnsSysctl writes value to path from inside the netns at nsPath.
func setNetnsSysctl(nsPath, path, value string) (bool, error) {
	var exists bool
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		exists, err = writeIfExists(path, value)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("set %s in netns %s: %w", path, nsPath, err)
	}
	return exists, nil
}

// writeIfExists writes value to an existing file; a missing file is
// (false, nil).
func writeIfExists(path, value string) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := f.WriteString(value); err != nil {
		_ = f.Close()
		return false, err
	}
	return true, f.Close()
}
