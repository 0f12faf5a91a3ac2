package guestkit

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// Mode is the node a scenario attaching pods in one RDMA netns mode runs
// on: the plugin's devices and how to wait for the node to settle.
type Mode struct {
	Name    string // "shared" or "exclusive"
	Devices string // the conflist's "devices" value
	NIC     string // the netdev the device is on
}

// SetUpMode makes the node for pods in mode, each step a check:
// exclusive switches the netns mode (only possible while no netns but
// init_net exists) and sets up simrdma0's NIC eth0 as a node has it;
// shared makes soft-RoCE rxe0 on veth0 with nodeV6/64 on it, through
// which soft-RoCE routes the pods' traffic. It fails t when a step fails.
func SetUpMode(t *testing.T, mode, nodeV6 string) Mode {
	t.Helper()
	var ok bool
	m := Mode{Name: mode, Devices: `["rxe0"]`, NIC: "veth0"}
	if mode == "exclusive" {
		m.Devices, m.NIC = `["simrdma0"]`, "eth0"
		ok = Check(t, "switch-to-exclusive", func() error {
			if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
				return fmt.Errorf("rdma system set netns exclusive: %w", err)
			}
			return ModeIs(rdma.ModeExclusive)
		})
		ok = ok && Check(t, "simrdma0-on-eth0", func() error { return BoundTo("simrdma0", "eth0") })
		ok = ok && Check(t, "nic-setup", func() error { return SetUpNIC("eth0") })
	} else {
		ok = Check(t, "rxe0-setup", SetUpRxe)
		ok = ok && Check(t, "node-v6", func() error { return AddrOnce("veth0", nodeV6+"/64") })
	}
	if !ok {
		t.Fatalf("the %s-mode node could not be set up: no case runs", mode)
	}
	return m
}

// Settle waits for what a move back makes asynchronous: in exclusive
// mode eth0's carrier and link-local address; nothing in shared mode.
func (m Mode) Settle() error {
	if m.Name == "exclusive" {
		return WaitSettled(m.NIC)
	}
	return nil
}

// ModeIs checks that the RDMA netns mode is want.
func ModeIs(want rdma.Mode) error {
	mode, err := rdma.New().NetnsMode()
	if err == nil && mode != want {
		err = fmt.Errorf("RDMA netns mode %q, want %s", mode, want)
	}
	return err
}

// AddrOnce puts cidr on netdev name unless it is there (IPv6 without DAD).
func AddrOnce(name, cidr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	as, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, have := range as {
		if have.IPNet.String() == a.IPNet.String() {
			return nil
		}
	}
	if a.IP.To4() == nil {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("%s on %s: %w", cidr, name, err)
	}
	return nil
}

// HasAddr checks that netdev name (in this thread's netns) has cidr.
func HasAddr(name, cidr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	as, err := LinkAddrs(l)
	for _, a := range as {
		if a == "addr "+name+" "+cidr {
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%s lacks %s: %q", name, cidr, as)
	}
	return err
}

// PodAddr is the first address of link in the netns at nsPath that
// starts with prefix.
func PodAddr(nsPath, link, prefix string) (addr string, err error) {
	err = InPod(nsPath, func() error {
		l, err := netlink.LinkByName(link)
		if err != nil {
			return err
		}
		as, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
		for _, a := range as {
			if strings.HasPrefix(a.IP.String(), prefix) {
				addr = a.IP.String()
				return nil
			}
		}
		if err == nil {
			err = fmt.Errorf("no %s address on %s in %s: %v", prefix, link, nsPath, as)
		}
		return err
	})
	return addr, err
}
