package chain

import (
	"os"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// KernelEnv returns the seams over the real kernel and kubelet.
func KernelEnv() Env {
	return Env{
		RDMA:         kernelRDMA{rdma.New()},
		Links:        kernelLinks{},
		PodResources: func(socket string) PodResources { return podres.New(socket, podResourcesTimeout) },
		OpenNS:       ns.GetNS,
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
	}
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

// InNetns reports whether dev is visible in the netns at nsPath.
func (k kernelRDMA) InNetns(dev, nsPath string) (bool, error) { return rdma.InNetns(dev, nsPath) }

type kernelLinks struct{}

func (kernelLinks) MoveToPod(hostName string, podNS ns.NetNS, podName string) (netdev.HostLink, error) {
	return netdev.MoveToPod(hostName, podNS, podName)
}

func (kernelLinks) RestoreToHost(l netdev.HostLink, podNSPath string) error {
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
