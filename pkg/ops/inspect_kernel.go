package ops

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// reader is what inspect reads from the node; the kernel's in production,
// a fake in unit tests. An empty nsPath is the calling netns.
type reader interface {
	NetnsMode() (rdma.Mode, error)
	Devices() ([]rdma.Device, error)
	Ports(dev string) ([]Port, error)
	GIDs() ([]GID, error)
	GIDsIn(nsPath string) ([]GID, error)
	InNetns(dev, nsPath string) (bool, error)
	NetnsGone(nsPath string) (bool, error)
	Pnet(nsPath string) ([]smc.PnetEntry, error)
	UEIDs() ([]string, error)
	Fallbacks(nsPath string) (smc.FallbackReport, error)
	// SocketHook reads the transparent-SMC hook's pins (config.DefaultBPFFSDir)
	// through the hook binary beside this one.
	SocketHook() (attached bool, listed []uint32, err error)
	Interfaces(nsPath string) ([]Iface, error)
	SMCSysctls(nsPath string) (map[string]string, error)
}

// Port is one RDMA device port as sysfs shows it.
type Port struct {
	Port      int    `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"physState,omitempty"`
	GIDs      int    `json:"gids"`
}

// GID is one non-zero GID table row of an RDMA port.
type GID struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Netdev string `json:"netdev,omitempty"`
	Type   string `json:"type,omitempty"`
}

// Iface is one netdev of a netns.
type Iface struct {
	Name  string   `json:"name"`
	Kind  string   `json:"kind"`
	MAC   string   `json:"mac,omitempty"`
	Up    bool     `json:"up"`
	Addrs []string `json:"addrs,omitempty"`
	GIDs  []GID    `json:"gids,omitempty"`
	RDMA  bool     `json:"rdma"`
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
func (k *kernelReader) NetnsGone(nsPath string) (bool, error) { return netnsid.Gone(nsPath) }

func (k *kernelReader) Pnet(nsPath string) (list []smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(c *smc.Client) (err error) {
		list, err = c.PnetDump()
		return err
	})
	return list, err
}

func (k *kernelReader) UEIDs() (list []string, err error) {
	err = smc.Do("", func(c *smc.Client) (err error) {
		list, err = c.UEIDs()
		return err
	})
	return list, err
}

func (k *kernelReader) SocketHook() (bool, []uint32, error) {
	return hookcmd.Beside().State(config.DefaultBPFFSDir)
}

// Fallbacks reads the netns's SMC fallback statistics.
func (k *kernelReader) Fallbacks(nsPath string) (r smc.FallbackReport, err error) {
	err = smc.Do(nsPath, func(c *smc.Client) (err error) {
		r, err = c.FallbackReport()
		return err
	})
	return r, err
}

func (k *kernelReader) ibPath(parts ...string) string {
	return filepath.Join(append([]string{k.sys.SysRoot, "class", "infiniband"}, parts...)...)
}

// Ports reads ports/N/{state,phys_state,gids} from sysfs.
func (k *kernelReader) Ports(dev string) ([]Port, error) {
	entries, err := os.ReadDir(k.ibPath(dev, "ports"))
	if err != nil {
		return nil, err
	}
	var out []Port
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := Port{Port: n, State: sysfsWord(k.ibPath(dev, "ports", e.Name(), "state")),
			PhysState: sysfsWord(k.ibPath(dev, "ports", e.Name(), "phys_state"))}
		rows, _ := k.gidRows(dev, n)
		p.GIDs = len(rows)
		out = append(out, p)
	}
	return out, nil
}

// sysfsWord turns "4: ACTIVE" into "ACTIVE"; "" when unreadable.
func sysfsWord(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if _, w, ok := strings.Cut(s, ": "); ok {
		return w
	}
	return s
}

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000"

func (k *kernelReader) gidRows(dev string, port int) ([]GID, error) {
	p := strconv.Itoa(port)
	entries, err := os.ReadDir(k.ibPath(dev, "ports", p, "gids"))
	if err != nil {
		return nil, err
	}
	var out []GID
	for _, e := range entries {
		b, err := os.ReadFile(k.ibPath(dev, "ports", p, "gids", e.Name()))
		g := strings.TrimSpace(string(b))
		if err != nil || g == zeroGID || g == "" {
			continue
		}
		idx, _ := strconv.Atoi(e.Name())
		out = append(out, GID{Device: dev, Port: port, Index: idx, GID: g,
			Netdev: sysfsWord(k.ibPath(dev, "ports", p, "gid_attrs", "ndevs", e.Name())),
			Type:   sysfsWord(k.ibPath(dev, "ports", p, "gid_attrs", "types", e.Name()))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// GIDs lists every non-zero GID of every device visible in sysfs.
func (k *kernelReader) GIDs() ([]GID, error) {
	devs, err := os.ReadDir(k.ibPath())
	if err != nil {
		return nil, err
	}
	var out []GID
	for _, d := range devs {
		ports, _ := os.ReadDir(k.ibPath(d.Name(), "ports"))
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			rows, _ := k.gidRows(d.Name(), n)
			out = append(out, rows...)
		}
	}
	return out, nil
}

// GIDsIn lists the GIDs as the netns at nsPath sees them (exclusive mode:
// the devices moved into it).
func (k *kernelReader) GIDsIn(nsPath string) (gids []GID, err error) {
	err = inNetnsSysfs(nsPath, func(sysRoot string) (err error) {
		gids, err = (&kernelReader{sys: &rdma.System{SysRoot: sysRoot}}).GIDs()
		return err
	})
	return gids, err
}

// Interfaces lists the netdevs of the netns at nsPath with their addresses.
func (k *kernelReader) Interfaces(nsPath string) ([]Iface, error) {
	var out []Iface
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			a := l.Attrs()
			i := Iface{Name: a.Name, Kind: l.Type(), Up: a.Flags&net.FlagUp != 0}
			if len(a.HardwareAddr) > 0 {
				i.MAC = a.HardwareAddr.String()
			}
			addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
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
