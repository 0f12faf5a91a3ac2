package exclusive

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	bond     = "bond1"
	bondAddr = "10.66.0.2/24"
	bondGW   = "10.66.0.1"
)

var bondSlaves = []string{"bx0", "bx1"}

// bondCases are the two bindings of simrdma0 that exclusive mode refuses.
// Bound to the bond itself, which the kernel keeps in init_net
// (NETIF_F_NETNS_LOCAL), it gets 102 naming the bond and why. Bound to a
// slave of the bond while the bond carries the node's default route, its
// port's GIDs are on the bond in the kernel's RoCE GID table
// (gid_attrs/ndevs/0 is bond1), so the plugin's netdev of the device is
// bond1, and ADD is refused with 110 naming bond1 and the route before
// anything else is tried.
var bondCases = []struct {
	prefix     string // of the checks after the set-up
	bindTo     string // simrdma's netdev
	load, on   string // the set-up checks' names
	uplink     bool   // bond1 gets an address and the main table's default route
	refused    string
	code       uint
	words      []string
	pluginSees string // pkg/rdma's netdev of simrdma0
}{
	{"", bond, "simrdma-on-bond", "simrdma0-on-bond1", false, "refused-102", 102,
		[]string{bond, "it is a bond", "shared mode"}, bond},
	{"port-", "bx0", "simrdma-on-bond-port", "simrdma0-on-bx0", true, "port-refused-110", 110,
		[]string{"netdev bond1 of RDMA device simrdma0 carries the node's IPv4 default route"}, bond},
}

// TestBondExclusive is the bond-exclusive scenario (in the simrdma boot,
// after exclusive-rdma). In exclusive mode with simrdma0 bound to bond1,
// an active-backup bond of two veth links, or to one of its slaves
// (bondCases), ADD is refused before anything is recorded or moved, the bond and its
// slaves stay as they were, and DEL has nothing to give back. simrdma is
// loaded bound to eth0 again at the end, as the boot had it.
func TestBondExclusive(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	steps := []struct {
		name string
		f    func() error
	}{
		{"exclusive-mode", exclusiveMode},
		{"load-bonding", guestkit.LoadBonding},
		{"simrdma-unloaded", func() error { return guestkit.UnloadModule("simrdma") }},
		{"make-bond", func() error { return guestkit.MakeBond(bond, bondSlaves...) }},
	}
	for _, s := range steps {
		if !guestkit.Check(t, s.name, s.f) {
			t.FailNow()
		}
	}
	e := &env{Calls: guestkit.NewCalls(t, "1.0.0", "/run/rdma-chain-bondx")}
	e.Conf(t, `"mode":"exclusive","devices":["`+device+`"],"podSelection":"all","dataDir":"`+e.DataDir+`"`)
	for _, c := range bondCases {
		if !guestkit.Check(t, c.load, func() error { return loadSimrdma(c.bindTo) }) ||
			!guestkit.Check(t, c.on, func() error { return guestkit.BoundTo(device, c.bindTo) }) {
			t.FailNow()
		}
		guestkit.Check(t, c.prefix+"plugin-sees-"+c.pluginSees, func() error { // the GIDs come asynchronously
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error { return guestkit.DeviceOn(device, c.pluginSees) })
		})
		if c.uplink && !guestkit.Check(t, "bond1-default-route", func() error { return bondUplink(true) }) {
			t.FailNow()
		}
		logBond(t)
		before, err := bondView()
		mustDo(t, "the bond before ADD", err)
		p := guestkit.NewPod("xrdma-", "bx")
		guestkit.ExpectCode(t, c.refused, e.Add(t, p), c.code, c.words...)
		guestkit.Check(t, c.prefix+"no-record", func() error { return e.RecordCount(0) })
		guestkit.Check(t, c.prefix+"no-rdma-link-in-pod", func() error { return nothingInPod(p, bondMAC(t), append(bondSlaves, bond)...) })
		guestkit.Check(t, c.prefix+"device-in-init-net", func() error { return guestkit.BoundTo(device, c.bindTo) })
		guestkit.Check(t, c.prefix+"bond-untouched", func() error { return sameView(before, bondView) })
		guestkit.ExpectOK(t, c.prefix+"del-after-refusal", e.Gone(t, p))
		if c.uplink {
			mustDo(t, "remove bond1's route and address", bondUplink(false))
		}
	}
	guestkit.Check(t, "simrdma-back-on-eth0", func() error {
		if err := loadSimrdma(nic); err != nil {
			return err
		}
		return guestkit.BoundTo(device, nic)
	})
	t.Logf("bond-exclusive: %.0f s", time.Since(start).Seconds())
}

// exclusiveMode makes sure the RDMA netns mode is exclusive, switching to
// it if the boot's earlier scenarios did not (it can be only while no
// netns exists).
func exclusiveMode() error {
	if guestkit.ModeIs(rdma.ModeExclusive) == nil {
		return nil
	}
	if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
		return fmt.Errorf("rdma system set netns exclusive: %w", err)
	}
	return guestkit.ModeIs(rdma.ModeExclusive)
}

// loadSimrdma (re)loads simrdma with one device, simrdma0, on netdev.
func loadSimrdma(netdev string) error {
	if _, err := os.Stat("/sys/module/simrdma"); err == nil {
		if err := guestkit.UnloadModule("simrdma"); err != nil {
			return err
		}
	}
	if err := guestkit.LoadModule("simrdma", "netdev="+netdev); err != nil {
		return err
	}
	return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error { return guestkit.InInitNet(device) })
}

// bondUplink gives bond1 an address and the main table's default route
// through it (on), or takes both away.
func bondUplink(on bool) error {
	l, err := netlink.LinkByName(bond)
	if err != nil {
		return err
	}
	if on {
		if err := netnstest.AddAddrTo(l, bondAddr); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(bondGW)})
	}
	a, err := netlink.ParseAddr(bondAddr)
	if err != nil {
		return err
	}
	return errors.Join(netlink.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(bondGW)}), netlink.AddrDel(l, a))
}

func bondMAC(t *testing.T) string {
	l, err := netlink.LinkByName(bond)
	mustDo(t, bond, err)
	return l.Attrs().HardwareAddr.String()
}

// bondView is the bond and its slaves as configured: each one's nicView
// (name, MTU, MAC, addresses, routes), its kind and master, its flags but
// for the carrier's (active-backup with miimon may still be settling).
func bondView() ([]string, error) {
	var out []string
	for _, n := range append([]string{bond}, bondSlaves...) {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return nil, fmt.Errorf("%s in init_net: %w", n, err)
		}
		a := l.Attrs()
		v, err := guestkit.NICView(n)
		if err != nil {
			return nil, err
		}
		v[slices.IndexFunc(v, func(s string) bool { return strings.HasPrefix(s, "link ") })] = fmt.Sprintf("link %s %s master=%d mtu=%d mac=%s flags=%#x",
			n, l.Type(), a.MasterIndex, a.MTU, a.HardwareAddr, a.RawFlags&^(unix.IFF_LOWER_UP|unix.IFF_RUNNING|unix.IFF_DORMANT))
		out = append(out, v...)
	}
	return out, nil
}

// sameView checks that view() still reads before.
func sameView(before []string, view func() ([]string, error)) error {
	got, err := view()
	if err == nil && !slices.Equal(got, before) {
		err = fmt.Errorf("changed: %s", guestkit.Diff(before, got))
	}
	return err
}

// logBond logs the RDMA devices and the bond, as `rdma link` and `ip -d
// link show bond1` showed them.
func logBond(t *testing.T) {
	views(t, "bond")
	v, err := bondView()
	t.Logf("bond: %q %v", v, err)
	port, err := guestkit.PortNetdev(device, 1)
	t.Logf("bond: %s port 1 bound to %q %v", device, port, err)
}
