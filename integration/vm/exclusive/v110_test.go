package exclusive

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

var (
	virtioRE = regexp.MustCompile(`^virtio[0-9]+$`)
	pciRE    = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
)

// v110 checks that at cniVersion 1.1.0 rdma0's entry carries the moved
// NIC's MTU and, as pciID, the PCI function under eth0's virtio device
// (simrdma0 registers without a parent device, as eRDMA-like devices on a
// virtio NIC are found: netdev -> virtioN -> its PCI function); the whole
// chain's CHECK passes; with reportIPs the result also lists rdma0's
// address, pointing at rdma0, without gateway; the uplink is never moved
// (110); with runtimeConfig CNIDeviceInfoFile the NPWG device-info file
// names that PCI function and simrdma0, and DEL removes it.
func (e *env) v110(t *testing.T) {
	pci := nicPCI(t)
	guestkit.Check(t, "simrdma0-without-parent", func() error {
		if _, err := os.Lstat("/sys/class/infiniband/" + device + "/device"); err == nil {
			return fmt.Errorf("%s has a parent device", device)
		}
		return nil
	})
	e.mtuAndPCI(t, pci)
	e.reportIPs(t)
	e.uplinks(t)
	e.devInfo(t, pci)
}

// nicPCI is the PCI function under eth0's virtioN device.
func nicPCI(t *testing.T) string {
	dev, err := filepath.EvalSymlinks("/sys/class/net/" + nic + "/device")
	pci := filepath.Base(filepath.Dir(dev))
	guestkit.Check(t, "nic-on-virtio-pci", func() error {
		if err != nil {
			return fmt.Errorf("eth0's device link: %w", err)
		}
		if !virtioRE.MatchString(filepath.Base(dev)) || !pciRE.MatchString(pci) {
			return fmt.Errorf("eth0's device link %q is not virtioN under a PCI function", dev)
		}
		return nil
	})
	return pci
}

func (e *env) mtuAndPCI(t *testing.T, pci string) {
	b, err := os.ReadFile("/sys/class/net/" + nic + "/mtu")
	mustDo(t, "eth0's MTU", err)
	var mtu int
	_, err = fmt.Sscan(string(b), &mtu)
	mustDo(t, "eth0's MTU", err)
	p := guestkit.NewPod("xrdma-", "pod1")
	guestkit.ExpectOK(t, "add", e.Add(t, p))
	e.podHolds(t, "add", p)
	guestkit.ResultShape(t, "add-result", e.C.Stdout, e.V, p, pci)
	guestkit.Check(t, "add-mtu-is-nic-mtu", func() error {
		r, err := guestkit.ParseResult(e.C.Stdout)
		if err == nil {
			_, f := r.Iface("rdma0")
			err = guestkit.WantField(f, "mtu", float64(mtu))
		}
		return err
	})
	guestkit.ExpectOK(t, "check-full-chain", e.Check(t, p))
	guestkit.ExpectOK(t, "del", e.Gone(t, p))
	e.hostRestored(t, "del")
}

// reportIPs checks that the result has rdma0's address, pointing at rdma0,
// without a gateway.
func (e *env) reportIPs(t *testing.T) {
	e.Conf(t, e.entry+","+e.ipam+`,"reportIPs":true`)
	p := guestkit.NewPod("xrdma-", "pod1")
	guestkit.ExpectOK(t, "report-add", e.Add(t, p))
	t.Logf("reportIPs result at %s: %s", e.V, e.C.Stdout)
	r, err := guestkit.ParseResult(e.C.Stdout)
	idx, _ := r.Iface("rdma0")
	var addr string
	guestkit.Check(t, "report-ip-on-rdma0", func() error {
		if err != nil {
			return err
		}
		for _, ip := range r.IPs {
			if len(ip.Address) > 8 && ip.Address[:8] == "fd00:99:" {
				if ip.Gateway != "" {
					return fmt.Errorf("rdma0's IP carries a gateway: %+v", ip)
				}
				if ip.Interface == nil || *ip.Interface != idx || idx < 0 {
					return fmt.Errorf("fd00:99:: IP %+v does not point at rdma0 (interface %d)", ip, idx)
				}
				addr = ip.Address
				return nil
			}
		}
		return fmt.Errorf("no fd00:99:: IP in %s", e.C.Stdout)
	})
	guestkit.Check(t, "report-address-is-rdma0s", func() error {
		ip, _, _ := net.ParseCIDR(addr)
		if got := podIP6(t, p, "fd00:99:"); ip == nil || !ip.Equal(got) {
			return fmt.Errorf("result's address %q, rdma0 has %v", addr, got)
		}
		return nil
	})
	guestkit.ExpectOK(t, "report-del", e.Gone(t, p))
	e.hostRestored(t, "report")
}

// devInfo checks that the NPWG device-info file names eth0's PCI
// function and simrdma0; DEL removes it.
func (e *env) devInfo(t *testing.T, pci string) {
	const path = "/run/devinfo-xrdma/rdmanet-pod1-rdma0.json"
	e.Conf(t, e.entry+","+e.ipam+`,"capabilities":{"CNIDeviceInfoFile":true}`)
	p := guestkit.NewPod("xrdma-", "pod1")
	p.Caps = map[string]any{"CNIDeviceInfoFile": path}
	guestkit.ExpectOK(t, "devinfo-add", e.Add(t, p))
	b, err := os.ReadFile(path)
	t.Logf("device-info file after ADD: %s %v", b, err)
	guestkit.Check(t, "devinfo-names-virtio-pci-function", func() error {
		var d struct {
			Type string `json:"type"`
			PCI  struct {
				Address string `json:"pci-address"`
				Device  string `json:"rdma-device"`
			} `json:"pci"`
		}
		if err == nil {
			err = json.Unmarshal(b, &d)
		}
		if err == nil && (d.Type != "pci" || d.PCI.Address != pci || d.PCI.Device != device) {
			err = fmt.Errorf("device-info file %s: %s; want type pci, pci-address %s, rdma-device %s", path, b, pci, device)
		}
		return err
	})
	guestkit.ResultShape(t, "devinfo-result", e.C.Stdout, e.V, p, pci)
	guestkit.ExpectOK(t, "devinfo-del", e.Gone(t, p))
	guestkit.Check(t, "devinfo-removed-by-del", func() error {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s is still there after DEL", path)
		} else if !os.IsNotExist(err) {
			return fmt.Errorf("%s after DEL: %w", path, err)
		}
		return nil
	})
	e.hostRestored(t, "devinfo")
	mustDo(t, "remove the state", os.RemoveAll(e.DataDir))
}

// uplinkCases are the ways eth0 carries the node's traffic: a
// main-table IPv4 or IPv6 default route, or the source address of a
// default route through another netdev.
var uplinkCases = []struct {
	name, dev, gw, src, words string
}{
	{"ipv4-default", nic, "192.168.88.254", "", "the node's IPv4 default route"},
	{"ipv6-default", nic, "fd00:88::fe", "", "the node's IPv6 default route"},
	{"node-address", "up0", "10.77.0.1", "192.168.88.1", "the node's address 192.168.88.1"},
}

// uplinks checks that the node's uplink never moves: ADD is refused with
// 110 naming eth0 and what it carries, nothing is recorded or moved, and
// DEL has nothing to give back; a default route through another netdev
// (the control) moves eth0 as before.
func (e *env) uplinks(t *testing.T) {
	e.Conf(t, e.entry+","+e.ipam)
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"}
	mustDo(t, "veth up0", netlink.LinkAdd(up))
	for _, n := range []string{"up0p", "up0"} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		mustDo(t, "set up "+n, err)
		if n == "up0" {
			mustDo(t, "up0's address", netnstest.AddAddrTo(l, "10.77.0.2/24"))
		}
	}
	for _, c := range uplinkCases {
		t.Run("uplink-"+c.name, func(t *testing.T) { e.uplink(t, defaultRoute(t, c.dev, c.gw, c.src), c.words) })
	}
	r := defaultRoute(t, "up0", "10.77.0.1", "")
	mustDo(t, "default route via up0", netlink.RouteAdd(r))
	p := guestkit.NewPod("xrdma-", "pod1")
	guestkit.ExpectOK(t, "uplink-elsewhere-add", e.Add(t, p))
	e.podHolds(t, "uplink-elsewhere", p)
	guestkit.ExpectOK(t, "uplink-elsewhere-del", e.Gone(t, p))
	e.hostRestored(t, "uplink-elsewhere")
	mustDo(t, "delete the default route via up0", netlink.RouteDel(r))
	mustDo(t, "delete up0", netlink.LinkDel(up))
}

func defaultRoute(t *testing.T, dev, gw, src string) *netlink.Route {
	t.Helper()
	l, err := netlink.LinkByName(dev)
	mustDo(t, dev, err)
	return &netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw), Src: net.ParseIP(src)}
}

// uplink is one case: ADD refused with 110 while route is in place.
func (e *env) uplink(t *testing.T, route *netlink.Route, words string) {
	guestkit.Check(t, "route", func() error { return netlink.RouteAdd(route) })
	if t.Failed() {
		t.FailNow()
	}
	before, err := guestkit.NICView(nic)
	mustDo(t, "eth0 before", err)
	defaults, _ := nldump.RouteList(nil, nil, netlink.FAMILY_ALL)
	for _, r := range defaults {
		if r.Dst == nil {
			t.Logf("default route: %s", r)
		}
	}
	p := guestkit.NewPod("xrdma-", "up1")
	guestkit.ExpectCode(t, "refused-110", e.Add(t, p), 110, "netdev eth0 of RDMA device simrdma0 carries", words)
	guestkit.Check(t, "eth0-untouched", func() error {
		v, err := guestkit.NICView(nic)
		if err == nil && !slices.Equal(v, before) {
			err = fmt.Errorf("eth0 changed: %s", guestkit.Diff(before, v))
		}
		return err
	})
	guestkit.Check(t, "device-on-eth0", func() error { return guestkit.DeviceOn(device, nic) })
	guestkit.Check(t, "nothing-in-pod", func() error { return nothingInPod(p, e.b.mac) })
	guestkit.Check(t, "no-record", func() error { return e.RecordCount(0) })
	guestkit.ExpectOK(t, "del", e.Gone(t, p))
	mustDo(t, "delete the route", netlink.RouteDel(route))
	e.hostRestored(t, "uplink")
}

// nothingInPod checks that the pod has no link with mac, none of names,
// no rdma0 and sees no RDMA device.
func nothingInPod(p pod, mac string, names ...string) error {
	if name, err := podLinkByMAC(p.NetNS, mac); err != nil {
		return err
	} else if name != "" {
		return fmt.Errorf("the netdev with MAC %s in %s as %q", mac, p.Name, name)
	}
	for _, n := range append(names, "rdma0") {
		l, err := guestkit.PodLink(p.NetNS, n)
		if err == nil {
			return fmt.Errorf("%s in %s: a %s", n, p.Name, l.Type())
		} else if !errors.Is(err, guestkit.ErrAbsent) {
			return err
		}
	}
	devs, err := podDevices(p.NetNS)
	if err == nil && len(devs) > 0 {
		err = fmt.Errorf("%s sees %s", p.Name, devList(devs))
	}
	return err
}

// podLinkByMAC is the name of the link with mac in the netns at path.
func podLinkByMAC(path, mac string) (name string, err error) {
	err = guestkit.InPod(path, func() (err error) {
		name, err = linkByMAC(mac)
		return err
	})
	return name, err
}
