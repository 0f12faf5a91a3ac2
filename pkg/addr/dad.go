package addr

import (
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// waitDAD polls link's IPv6 addresses until none is tentative. A DAD
// failure is an ErrDADFailed naming the address; addresses still
// tentative at the deadline are an error naming them. It stands in for
// ip.SettleAddresses, whose DAD failure is plain text (no ErrDADFailed
// for errors.Is) and which reports success at the deadline while
// addresses are still tentative on a link that is not operationally up.
func waitDAD(h *netlink.Handle, link netlink.Link, timeout time.Duration) error {
	name := link.Attrs().Name
	deadline := time.Now().Add(timeout)
	for {
		addrs, err := addrList(h, link)
		if err != nil {
			return fmt.Errorf("list addresses of %s: %w", name, err)
		}
		tentative, failed := dadState(addrs)
		if len(failed) > 0 {
			return fmt.Errorf("%w on %s: %s", ErrDADFailed, name, strings.Join(failed, ", "))
		}
		if len(tentative) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("DAD on %s did not settle within %s (carrier down?): tentative %s",
				name, timeout, strings.Join(tentative, ", "))
		}
		time.Sleep(dadPoll)
	}
}

// dadState splits addrs into the still-tentative and the DAD-failed ones.
func dadState(addrs []netlink.Addr) (tentative, failed []string) {
	for _, a := range addrs {
		switch {
		case a.Flags&unix.IFA_F_DADFAILED != 0:
			failed = append(failed, a.IPNet.String())
		case a.Flags&unix.IFA_F_TENTATIVE != 0:
			tentative = append(tentative, a.IPNet.String())
		}
	}
	return tentative, failed
}

// addrList lists link's IPv6 addresses (netlinksafe has no AddrList on a
// handle bound to another netns).
func addrList(h *netlink.Handle, link netlink.Link) ([]netlink.Addr, error) {
	return nldump.AddrList(h, link, netlink.FAMILY_V6)
}
