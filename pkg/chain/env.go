package chain

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// KernelEnv returns the seams over the real kernel and kubelet.
func KernelEnv() Env {
	return Env{
		RDMA:         kernelRDMA{rdma.New()},
		Links:        kernelLinks{},
		IPAM:         addr.Exec(),
		Addrs:        kernelAddrs{},
		SMC:          kernelSMC{},
		PodResources: func(socket string) PodResources { return podres.New(socket, podres.DefaultTimeout) },
		OpenNS:       ns.GetNS,
		NetnsInode:   netnsInode,
		NetnsCookie:  netnsCookie,
		OwnNetns:     ownNetns,
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
	}
}

// netnsInode is state.NetnsInode with a gone netns told apart from an error.
func netnsInode(path string) (uint64, bool, error) {
	ino, err := state.NetnsInode(path)
	switch {
	case errors.Is(err, state.ErrNetnsGone):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return ino, true, nil
}

// netnsCookie is the kernel's id of the netns at path, which unlike its
// inode number is never reused: SO_NETNS_COOKIE of a socket made inside it.
func netnsCookie(path string) (uint64, error) {
	n, err := ns.GetNS(path)
	if err != nil {
		return 0, err
	}
	defer n.Close()
	var cookie uint64
	err = n.Do(func(ns.NetNS) (err error) {
		cookie, err = netdev.CurrentNetnsCookie()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("netns cookie of %s: %w", path, err)
	}
	return cookie, nil
}

// ownNetns reports whether path is the netns the plugin runs in.
func ownNetns(path string) (bool, error) {
	var pod, own unix.Stat_t
	if err := unix.Stat(path, &pod); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &own); err != nil {
		return false, fmt.Errorf("stat the plugin's netns: %w", err)
	}
	return pod.Ino == own.Ino && pod.Dev == own.Dev, nil
}

type kernelRDMA struct{ *rdma.System }

// ReturnToHost returns dev to the netns the plugin runs in (the host's).
func (k kernelRDMA) ReturnToHost(dev, podNSPath string) error {
	host, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer host.Close()
	return rdma.ReturnToHost(dev, podNSPath, int(host.Fd()))
}

// CheckMovable checks d against the running kernel's release.
func (k kernelRDMA) CheckMovable(d rdma.Device) error {
	return rdma.CheckMovable(d, rdma.KernelRelease())
}

// InNetns reports whether dev is visible in the netns at nsPath.
func (k kernelRDMA) InNetns(dev, nsPath string) (bool, error) { return rdma.InNetns(dev, nsPath) }

type kernelAddrs struct{}

func (kernelAddrs) Configure(podNS ns.NetNS, ifName string, res *types100.Result, opts addr.Options) error {
	return addr.Configure(podNS, ifName, res, opts)
}

func (kernelAddrs) Prefixes(netdev string) ([]netip.Prefix, error) {
	return addr.NetdevPrefixes(netdev)
}

func (kernelAddrs) HostRouteWarning(parent string, ips []*types100.IPConfig) string {
	return addr.HostRouteWarning(parent, ips)
}

type kernelLinks struct{}

func (kernelLinks) NetnsLocal(name string) (string, error) { return netdev.NetnsLocal(name) }

func (kernelLinks) Describe(hostName, podName string) (state.HostLink, error) {
	return netdev.Describe(hostName, podName)
}

func (kernelLinks) MoveToPod(hl state.HostLink, podNS ns.NetNS) error {
	return netdev.MoveToPod(hl, podNS)
}

func (kernelLinks) RestoreToHost(l state.HostLink, podNSPath string) error {
	return netdev.RestoreToHost(l, podNSPath)
}

func (kernelLinks) AddChild(spec netdev.ChildSpec, podNS ns.NetNS) (netdev.Child, error) {
	return netdev.AddChild(spec, podNS)
}

func (kernelLinks) DelChild(podNSPath, name, expectMAC string) error {
	return netdev.DelChild(podNSPath, name, expectMAC)
}

func (kernelLinks) CheckInPod(podNSPath, name, mac string) error {
	return netdev.CheckInPod(podNSPath, name, mac)
}
