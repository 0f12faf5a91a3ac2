package guestkit

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// MakeBond makes an active-backup bond (miimon 100) of veth links slaves (each
// with its peer SLAVEp up in init_net), up, with carrier and settled.
func MakeBond(name string, slaves ...string) error {
	b := netlink.NewLinkBond(netlink.LinkAttrs{Name: name})
	b.Mode, b.Miimon = netlink.BOND_MODE_ACTIVE_BACKUP, 100
	if err := netlink.LinkAdd(b); err != nil {
		return fmt.Errorf("bond %s: %w", name, err)
	}
	for _, s := range slaves {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s}, PeerName: s + "p"}); err != nil {
			return fmt.Errorf("veth %s: %w", s, err)
		}
		peer, err := netlink.LinkByName(s + "p")
		if err == nil {
			err = netlink.LinkSetUp(peer)
		}
		if err == nil {
			err = netlink.LinkSetMasterByIndex(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: s}}, b.Index)
		}
		if err != nil {
			return fmt.Errorf("slave %s of %s: %w", s, name, err)
		}
	}
	if err := netlink.LinkSetUp(b); err != nil {
		return err
	}
	return WaitSettled(name)
}

// AddRxe makes soft-RoCE device name on netdev and waits for it to
// register (asynchronously on some kernels).
func AddRxe(name, netdev string) error {
	if err := netlink.RdmaLinkAdd(name, "rxe", netdev); err != nil {
		return fmt.Errorf("rdma link add %s type rxe netdev %s: %w", name, netdev, err)
	}
	return Poll(10*time.Second, 100*time.Millisecond, func() error {
		_, err := os.Stat("/sys/class/infiniband/" + name)
		return err
	})
}

// DelRxe removes soft-RoCE device name.
func DelRxe(name string) error {
	if err := netlink.RdmaLinkDel(name); err != nil {
		return fmt.Errorf("rdma link del %s: %w", name, err)
	}
	return nil
}

// PortView is RDMA device dev's first port and its netdev, as `rdma link
// show DEV/1` tells.
func PortView(dev string) (string, error) {
	sys := rdma.New()
	devs, err := sys.Devices()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(devs, func(d rdma.Device) bool { return d.Name == dev })
	if i < 0 {
		return "", fmt.Errorf("%s not in init_net", dev)
	}
	ports, err := sys.Ports(dev)
	if err != nil {
		return "", fmt.Errorf("ports of %s: %w", dev, err)
	}
	if len(ports) == 0 {
		return "", fmt.Errorf("%s has no port", dev)
	}
	return fmt.Sprintf("%s/%d state=%s phys=%s netdev=%s", dev, ports[0].Port, ports[0].State, ports[0].PhysState, devs[i].Netdev), nil
}

// InitNetHas checks that init_net's RDMA netlink lists dev.
func InitNetHas(dev string) (bool, error) {
	links, err := nldump.RdmaLinkList(nil)
	if err != nil {
		return false, fmt.Errorf("list init_net's RDMA devices: %w", err)
	}
	return slices.ContainsFunc(links, func(l *netlink.RdmaLink) bool { return l.Attrs.Name == dev }), nil
}

// InInitNet checks that init_net's RDMA netlink lists dev.
func InInitNet(dev string) error {
	has, err := InitNetHas(dev)
	if err == nil && !has {
		err = fmt.Errorf("RDMA device %s not in init_net", dev)
	}
	return err
}

// DeviceOn checks that dev is visible here, pkg/rdma reading its port bound
// to netdev.
func DeviceOn(dev, netdev string) error {
	devs, err := rdma.New().Devices()
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.Name == dev {
			if d.Netdev != netdev {
				return fmt.Errorf("RDMA device %s on netdev %q, want %s", dev, d.Netdev, netdev)
			}
			return nil
		}
	}
	return fmt.Errorf("RDMA device %s not visible: %+v", dev, devs)
}

// LinkIndex is netdev name's ifindex.
func LinkIndex(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}
