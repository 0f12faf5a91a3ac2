package exclusive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// nicView is what DEL must restore of netdev name in init_net: name, MTU,
// MAC, flags, addresses, and the routes through it of every table and
// family, sorted.
func nicView(name string) ([]string, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("no netdev %s in init_net: %w", name, err)
	}
	a := l.Attrs()
	out := []string{fmt.Sprintf("link %s mtu=%d mac=%s flags=%#x", a.Name, a.MTU, a.HardwareAddr, a.RawFlags)}
	addrs, err := guestkit.LinkAddrs(l)
	if err != nil {
		return nil, err
	}
	rs, err := guestkit.Routes(l)
	if err != nil {
		return nil, err
	}
	out = append(out, addrs...)
	for _, r := range rs {
		out = append(out, guestkit.RouteLine(r, ""))
	}
	slices.Sort(out)
	return out, nil
}

// simGIDs is "GID NDEV TYPE" of each GID of simrdma0 port 1 as the netns
// at nsPath ("": init_net) sees it, sorted (no index: the kernel may
// reorder on re-add); an error when simrdma0 is not visible there.
func simGIDs(nsPath string) ([]string, error) { return devGIDs(device, nsPath) }

// devGIDs is simGIDs of RDMA device dev.
func devGIDs(dev, nsPath string) ([]string, error) {
	var gs []rdma.GID
	var err error
	if nsPath == "" {
		if _, err := os.Stat("/sys/class/infiniband/" + dev + "/ports/1"); err != nil {
			return nil, fmt.Errorf("%s not visible in init_net: %w", dev, err)
		}
		gs, err = rdma.New().GIDs()
	} else {
		gs, err = rdma.GIDsIn(nsPath)
	}
	if err != nil {
		return nil, fmt.Errorf("GIDs in %q: %w", nsPath, err)
	}
	var out []string
	for _, g := range gs {
		if g.Device == dev && g.Port == 1 {
			out = append(out, g.GID+" "+g.Netdev+" "+g.Type)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no GID of %s in %q: %+v", dev, nsPath, gs)
	}
	slices.Sort(out)
	return out, nil
}

// rxeView is rxe0's port 1 and netdev, as `rdma link show rxe0/1` tells.
func rxeView() (string, error) {
	sys := rdma.New()
	devs, err := sys.Devices()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(devs, func(d rdma.Device) bool { return d.Name == rxe })
	if i < 0 {
		return "", fmt.Errorf("%s not in init_net", rxe)
	}
	ports, err := sys.Ports(rxe)
	if err != nil {
		return "", fmt.Errorf("ports of %s: %w", rxe, err)
	}
	if len(ports) == 0 {
		return "", fmt.Errorf("%s has no port", rxe)
	}
	return fmt.Sprintf("%s/%d state=%s phys=%s netdev=%s", rxe, ports[0].Port, ports[0].State, ports[0].PhysState, devs[i].Netdev), nil
}

// inPod runs f on a thread in the netns at path.
func inPod(path string, f func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return f() })
}

// podDevices lists the RDMA devices the netns at path sees, each with
// the netdev its port is bound to there.
func podDevices(path string) (devs []rdma.Device, err error) {
	err = inPod(path, func() (err error) {
		devs, err = rdma.New().Devices()
		return err
	})
	return devs, err
}

// podLink reads link name in the netns at path; errAbsent when it has
// none.
func podLink(path, name string) (l netlink.Link, err error) {
	err = inPod(path, func() error {
		l, err = netlink.LinkByName(name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return errAbsent
		}
		return err
	})
	return l, err
}

// noRdma0: the pod at path has no rdma0.
func noRdma0(path string) error {
	l, err := podLink(path, "rdma0")
	switch {
	case errors.Is(err, errAbsent):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("rdma0 in %s: %s %s", path, l.Type(), l.Attrs().HardwareAddr)
}

// linkByMAC is the name of init_net's netdev with mac, "" if none.
func linkByMAC(mac string) (string, error) {
	ls, err := netlink.LinkList()
	for _, l := range ls {
		if l.Attrs().HardwareAddr.String() == mac {
			return l.Attrs().Name, nil
		}
	}
	return "", err
}

// refundOrder polls, after a pod netns holding the device and the NIC was
// deleted, until the kernel gave both back to init_net, and says which
// came first.
func refundOrder(mac string) (string, error) {
	start := time.Now()
	var dev, back time.Duration = -1, -1
	for time.Since(start) < 10*time.Second && (dev < 0 || back < 0) {
		if dev < 0 && inInitNet(device) == nil {
			dev = time.Since(start)
		}
		if n, _ := linkByMAC(mac); back < 0 && n != "" {
			back = time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	msg := fmt.Sprintf("device back after %v, NIC after %v (-1: never within 10 s)", dev.Round(time.Millisecond), back.Round(time.Millisecond))
	if dev < 0 || back < 0 {
		return msg, errors.New(msg)
	}
	return msg, nil
}

// views logs the RDMA devices and links of init_net and of pods.
func views(t *testing.T, label string, pods ...pod) {
	t.Helper()
	devs, err := rdma.New().Devices()
	t.Logf("view %s: init_net RDMA devices: %s %v", label, devList(devs), err)
	ls, err := netlink.LinkList()
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name+"("+l.Attrs().HardwareAddr.String()+")")
	}
	t.Logf("view %s: init_net links: %s %v", label, strings.Join(names, " "), err)
	for _, p := range pods {
		devs, err := podDevices(p.NetNS)
		t.Logf("view %s: %s RDMA devices: %s %v", label, p.Name, devList(devs), err)
		l, err := podLink(p.NetNS, "rdma0")
		if err != nil {
			t.Logf("view %s: %s rdma0: %v", label, p.Name, err)
			continue
		}
		a := l.Attrs()
		t.Logf("view %s: %s rdma0: %s mtu=%d mac=%s alias=%q flags=%v", label, p.Name, l.Type(), a.MTU, a.HardwareAddr, a.Alias, a.Flags)
	}
}

func devList(devs []rdma.Device) string {
	var s []string
	for _, d := range devs {
		s = append(s, d.Name+"/"+d.Netdev)
	}
	return strings.Join(s, " ")
}

// records lists the attachment records under dataDir.
func records(dataDir string) ([]string, error) {
	es, err := os.ReadDir(dataDir + "/attachments")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

// recordCount: exactly n records under dataDir.
func recordCount(dataDir string, n int) error {
	recs, err := records(dataDir)
	if err != nil {
		return err
	}
	if len(recs) != n {
		return fmt.Errorf("%d records, want %d: %q", len(recs), n, recs)
	}
	return nil
}
