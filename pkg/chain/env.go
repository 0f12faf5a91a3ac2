package chain

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
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
		PodResources: kubeletPodResources{},
		Netns:        kernelNetns{},
		SoftRoCE:     kernelSoftRoCE{rdma.New()},
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
	}
}

// kernelNetns opens and identifies network namespaces by path.
type kernelNetns struct{}

func (kernelNetns) Open(path string) (ns.NetNS, error) { return ns.GetNS(path) }

func (kernelNetns) ID(path string) (netnsid.ID, error) { return netnsid.Of(path) }

// Own reports whether path is the netns the plugin runs in.
func (kernelNetns) Own(path string) (bool, error) {
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

// kubeletPodResources asks kubelet through pkg/podres, one connection per
// call.
type kubeletPodResources struct{}

func (kubeletPodResources) Lookup(ctx context.Context, socket, namespace, name string, q podres.Query) (*podres.Pod, error) {
	return podres.New(socket, podres.DefaultTimeout).Lookup(ctx, namespace, name, q)
}

func (kubeletPodResources) Probe(ctx context.Context, socket string) error {
	return podres.New(socket, podres.DefaultTimeout).Probe(ctx)
}

func (kubeletPodResources) Serving(ctx context.Context, socket string) error {
	return podres.New(socket, podres.DefaultTimeout).Serving(ctx)
}

type kernelRDMA struct{ *rdma.System }

// ReturnToHost returns dev to the netns the plugin runs in (the host's).
func (k kernelRDMA) ReturnToHost(dev, podNSPath string) error {
	host, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer host.Close()
	return k.System.ReturnToHost(dev, podNSPath, int(host.Fd()))
}

// CheckMovable checks d against the running kernel's release.
func (k kernelRDMA) CheckMovable(d rdma.Device) error {
	return rdma.CheckMovable(d, rdma.KernelRelease())
}

// kernelSoftRoCE makes and deletes per-pod rxe devices on the running
// kernel.
type kernelSoftRoCE struct{ *rdma.System }

func (kernelSoftRoCE) Unsupported() string { return rdma.SoftRoCEUnsupported(rdma.KernelRelease()) }

func (k kernelSoftRoCE) Add(nsPath, name, netdev string) error {
	return k.AddSoftRoCE(nsPath, name, netdev)
}

func (k kernelSoftRoCE) Del(name string) error { return k.DelSoftRoCE(name) }

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

func (kernelLinks) NodeUplinks(nodeAddrs []netip.Addr) (map[string]string, error) {
	return netdev.NodeUplinks(nodeAddrs)
}

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

func (kernelLinks) DelChildByID(id netdev.ChildID, expectMAC string) error {
	return netdev.DelChildByID(id, expectMAC)
}

func (kernelLinks) CheckInPod(podNSPath, name, mac string) error {
	return netdev.CheckInPod(podNSPath, name, mac)
}
