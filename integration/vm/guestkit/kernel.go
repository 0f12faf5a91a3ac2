package guestkit

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// modDir holds the guest's modules (scripts/vm/initramfs.sh: uncompressed
// .ko files, /lib/modules/kver names the kernel, load-bond the bonding
// module and its dependencies in load order).
const modDir = "/lib/modules"

// LoadModule loads the guest's module name with params, as insmod does
// (finit_module), unless it is loaded already.
func LoadModule(name, params string) error {
	if _, err := os.Stat("/sys/module/" + name); err == nil {
		return nil
	}
	kver, err := os.ReadFile(modDir + "/kver")
	if err != nil {
		return err
	}
	path := modDir + "/" + strings.TrimSpace(string(kver)) + "/" + name + ".ko"
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil {
		return fmt.Errorf("insmod %s %s: %w", path, params, err)
	}
	return nil
}

// UnloadModule unloads module name, as rmmod does; a module still in use
// (EBUSY, EAGAIN: a device of it releasing) is asked again for 10 s.
func UnloadModule(name string) error {
	return Poll(10*time.Second, 100*time.Millisecond, func() error {
		err := unix.DeleteModule(name, unix.O_NONBLOCK)
		if err != nil {
			err = fmt.Errorf("rmmod %s: %w", name, err)
		}
		return err
	})
}

// LoadBonding loads the bonding module and its dependencies without a
// bond0 (max_bonds=0), as lib.sh's load_bonding does.
func LoadBonding() error {
	b, err := os.ReadFile(modDir + "/load-bond")
	if err != nil {
		return err
	}
	mods := strings.Fields(string(b))
	if len(mods) == 0 {
		return errors.New(modDir + "/load-bond lists no module")
	}
	for _, m := range mods {
		params := ""
		if m == "bonding" {
			params = "max_bonds=0"
		}
		if err := LoadModule(m, params); err != nil {
			return err
		}
	}
	return nil
}

// PortNetdev is the netdev the kernel binds to port of RDMA device dev, as
// `rdma link` shows it (RDMA_NLDEV_CMD_PORT_GET's NDEV_NAME), asked from
// this thread's netns: "" when that netdev is in another netns. The
// plugin's own mapping (pkg/rdma's Device.Netdev) reads the GID table
// first, which puts a bond's port's GIDs on the bond.
func PortNetdev(dev string, port uint32) (string, error) {
	l, err := netlink.RdmaLinkByName(dev)
	if err != nil {
		return "", fmt.Errorf("RDMA device %s: %w", dev, err)
	}
	const portGet = 5 // RDMA_NLDEV_CMD_PORT_GET
	req := nl.NewNetlinkRequest(nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT|portGet, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(l.Attrs.Index)))
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_PORT_INDEX, nl.Uint32Attr(port)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return "", fmt.Errorf("port %d of %s: %w", port, dev, err)
	}
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m)
		if err != nil {
			return "", fmt.Errorf("port %d of %s: %w", port, dev, err)
		}
		for _, a := range attrs {
			if a.Attr.Type == nl.RDMA_NLDEV_ATTR_NDEV_NAME {
				return strings.TrimRight(string(a.Value), "\x00"), nil
			}
		}
	}
	return "", nil
}

// BoundTo checks that RDMA device dev is visible in this thread's netns with port 1
// bound to netdev, as the kernel has it.
func BoundTo(dev, netdev string) error {
	got, err := PortNetdev(dev, 1)
	if err == nil && got != netdev {
		err = fmt.Errorf("RDMA device %s port 1 on netdev %q, want %s", dev, got, netdev)
	}
	return err
}

// softRoCEServed is, per kernel of docs/kernels.md, whether podSoftRoCE
// serves pods there: rdma_rxe works inside a netns from Linux 7.1.
var softRoCEServed = map[string]bool{"6.1": false, "6.12": false, "7.3": true}

// SoftRoCEServed says whether the running kernel serves podSoftRoCE, by
// the tier's kernel table; a kernel not in it is an error.
func SoftRoCEServed() (bool, error) {
	release := rdma.KernelRelease()
	parts := strings.SplitN(release, ".", 3)
	key := release
	if len(parts) >= 2 {
		key = parts[0] + "." + strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	}
	served, ok := softRoCEServed[key]
	if !ok {
		return false, fmt.Errorf("kernel %s (%s) is not in the tier's table: podSoftRoCE's expectation unknown", key, release)
	}
	return served, nil
}
