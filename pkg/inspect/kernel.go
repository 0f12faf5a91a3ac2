package inspect

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// reader is what inspect reads from the node; the kernel's in production,
// a fake in unit tests. An empty nsPath is the calling netns.
type reader interface {
	NetnsMode() (rdma.Mode, error)
	Devices() ([]rdma.Device, error)
	Ports(dev string) ([]rdma.Port, error)
	GIDs() ([]rdma.GID, error)
	GIDsIn(nsPath string) ([]rdma.GID, error)
	InNetns(dev, nsPath string) (bool, error)
	// NetnsGone is state.Record.NetnsGone on the kernel.
	NetnsGone(rec *state.Record) (bool, error)
	Pnet(nsPath string) ([]smc.PnetEntry, error)
	UEIDs() ([]string, error)
	Fallbacks(nsPath string) (smc.FallbackReport, error)
	// SocketHook reads the transparent-SMC hook's pins (config.DefaultBPFFSDir)
	// through the hook binary beside this one.
	SocketHook() (hookmap.Status, error)
	// SMCOffer is smc.Detect with the hook's pins under config.DefaultBPFFSDir.
	SMCOffer() smc.Offer
	// SoftRoCEUnsupported says why this kernel cannot serve podSoftRoCE,
	// "" when it can (rdma.SoftRoCEUnsupported).
	SoftRoCEUnsupported() string
	Interfaces(nsPath string) ([]Iface, error)
	SMCSysctls(nsPath string) (map[string]string, error)
}

// Iface is one netdev of a netns.
type Iface struct {
	Name  string     `json:"name"`
	Kind  string     `json:"kind"`
	MAC   string     `json:"mac,omitempty"`
	Up    bool       `json:"up"`
	Addrs []string   `json:"addrs,omitempty"`
	GIDs  []rdma.GID `json:"gids,omitempty"`
	RDMA  bool       `json:"rdma"`
}

type kernelReader struct {
	sys *rdma.System
}

func newKernelReader() *kernelReader { return &kernelReader{sys: rdma.New()} }

func (k *kernelReader) NetnsMode() (rdma.Mode, error)   { return k.sys.NetnsMode() }
func (k *kernelReader) Devices() ([]rdma.Device, error) { return k.sys.Devices() }
func (k *kernelReader) InNetns(dev, nsPath string) (bool, error) {
	return k.sys.InNetns(dev, nsPath)
}
func (k *kernelReader) NetnsGone(rec *state.Record) (bool, error) {
	return rec.NetnsGone(netnsid.Of)
}
func (k *kernelReader) Ports(dev string) ([]rdma.Port, error) { return k.sys.Ports(dev) }
func (k *kernelReader) GIDs() ([]rdma.GID, error)             { return k.sys.GIDs() }
func (k *kernelReader) GIDsIn(nsPath string) ([]rdma.GID, error) {
	return rdma.GIDsIn(nsPath)
}

func (k *kernelReader) Pnet(nsPath string) (list []smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		list, err = client.PnetDump()
		return err
	})
	return list, err
}

func (k *kernelReader) UEIDs() (list []string, err error) {
	err = smc.Do("", func(client *smc.Client) (err error) {
		list, err = client.UEIDs()
		return err
	})
	return list, err
}

func (k *kernelReader) SocketHook() (hookmap.Status, error) {
	return hookcmd.Beside().State(config.DefaultBPFFSDir)
}

func (k *kernelReader) SoftRoCEUnsupported() string {
	return rdma.SoftRoCEUnsupported(rdma.KernelRelease())
}

func (k *kernelReader) SMCOffer() smc.Offer {
	return smc.Detect(func() error { return hookcmd.Beside().Supported(config.DefaultBPFFSDir) })
}

// Fallbacks reads the netns's SMC fallback statistics.
func (k *kernelReader) Fallbacks(nsPath string) (r smc.FallbackReport, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		r, err = client.FallbackReport()
		return err
	})
	return r, err
}

// Interfaces lists the netdevs of the netns at nsPath with their addresses.
func (k *kernelReader) Interfaces(nsPath string) ([]Iface, error) {
	var out []Iface
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		links, err := nldump.LinkList(nil)
		if err != nil {
			return err
		}
		for _, l := range links {
			a := l.Attrs()
			i := Iface{Name: a.Name, Kind: l.Type(), Up: a.Flags&net.FlagUp != 0}
			if len(a.HardwareAddr) > 0 {
				i.MAC = a.HardwareAddr.String()
			}
			addrs, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", a.Name, err)
			}
			for _, ad := range addrs {
				i.Addrs = append(i.Addrs, ad.IPNet.String())
			}
			out = append(out, i)
		}
		return nil
	})
	return out, err
}

// SMCSysctls reads net.smc.* as the netns at nsPath sees them.
func (k *kernelReader) SMCSysctls(nsPath string) (map[string]string, error) {
	out := map[string]string{}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		entries, err := os.ReadDir("/proc/sys/net/smc")
		if err != nil {
			return err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join("/proc/sys/net/smc", e.Name()))
			if err == nil {
				out[e.Name()] = strings.Join(strings.Fields(string(b)), " ")
			}
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("no /proc/sys/net/smc in this netns (SMC not loaded)")
	}
	return out, err
}
