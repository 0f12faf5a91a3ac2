package lingjun

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// multiDev is device i of the multi scenario: rxe1I on netdev mnI
// (a veth with its peer mnIp up), whose /64 is fd00:9I::/64.
type multiDev struct{ dev, netdev, prefix string }

func multiDevs() []multiDev {
	var ds []multiDev
	for i := range 4 {
		ds = append(ds, multiDev{fmt.Sprintf("rxe1%d", i), fmt.Sprintf("mn%d", i), fmt.Sprintf("fd00:9%d::", i)})
	}
	return ds
}

func TestMulti(t *testing.T) {
	testenv.VMGuest(t)
	devs := multiDevs()
	if !guestkit.Check(t, "four-devices", func() error { return setUpMulti(devs) }) {
		t.Fatal("the node could not be set up: no case runs")
	}
	var names []string
	for _, d := range devs {
		names = append(names, `"`+d.dev+`"`)
	}
	s := newSetup(t, "multi", "/run/ipam-multi/rdmanet", "fd00:9", `"devices":[`+strings.Join(names, ",")+`]`)
	pods := []pod{guestkit.NewPod("multi-", "m1"), guestkit.NewPod("multi-", "m2")}
	addrs := map[string]string{} // "m1/0" -> m1's rdma0 address
	for _, p := range pods {
		if !guestkit.ExpectOK(t, "add-"+p.Name, s.Add(t, p)) {
			continue
		}
		for i, d := range devs {
			link := fmt.Sprintf("rdma%d", i)
			a, err := guestkit.PodAddr(p.NetNS, link, d.prefix+"f:0:c0")
			addrs[fmt.Sprintf("%s/%d", p.Name, i)] = a
			guestkit.Check(t, fmt.Sprintf("child-%d-of-%s-%s", i, d.netdev, p.Name), func() error {
				idx, ierr := guestkit.LinkIndex(d.netdev)
				return errors.Join(err, ierr, childOf(p, link, idx),
					guestkit.InPod(p.NetNS, func() error { return guestkit.HasAddr(link, a+"/124") }))
			})
			others := slices.DeleteFunc(deviceNames(devs), func(n string) bool { return n == d.dev })
			guestkit.Check(t, fmt.Sprintf("gid-%d-%s", i, p.Name), func() error { return gidOnly(a, link, d.dev, others) })
		}
	}
	for i, d := range devs {
		guestkit.Check(t, "rping-"+d.dev, func() error {
			return guestkit.Rping(t, d.dev, pods[0], pods[1], addrs[fmt.Sprintf("m1/%d", i)], 5)
		})
	}
	s.delAll(t, pods...)
	for _, d := range devs {
		if err := guestkit.DelRxe(d.dev); err != nil {
			t.Error(err)
		}
	}
}

// setUpMulti makes each device's netdev, its node address and the
// soft-RoCE device on it.
func setUpMulti(devs []multiDev) error {
	for _, d := range devs {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: d.netdev}, PeerName: d.netdev + "p"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("%s: %w", d.netdev, err)
		}
		for _, n := range []string{d.netdev + "p", d.netdev} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				return fmt.Errorf("%s up: %w", n, err)
			}
		}
		if err := guestkit.AddrOnce(d.netdev, d.prefix+"1/64"); err != nil {
			return fmt.Errorf("%s1/64 on %s: %w", d.prefix, d.netdev, err)
		}
		if err := guestkit.AddRxe(d.dev, d.netdev); err != nil {
			return err
		}
	}
	return nil
}

func deviceNames(devs []multiDev) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.dev)
	}
	return out
}
