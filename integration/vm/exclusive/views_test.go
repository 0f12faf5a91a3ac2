package exclusive

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

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

// podDevices lists the RDMA devices the netns at path sees, each with
// the netdev its port is bound to there.
func podDevices(path string) (devs []rdma.Device, err error) {
	err = guestkit.InPod(path, func() (err error) {
		devs, err = rdma.New().Devices()
		return err
	})
	return devs, err
}

// linkByMAC is the name of init_net's netdev with mac, "" if none.
func linkByMAC(mac string) (string, error) {
	ls, err := nldump.LinkList(nil)
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
		if dev < 0 && guestkit.InInitNet(device) == nil {
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
	ls, err := nldump.LinkList(nil)
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name+"("+l.Attrs().HardwareAddr.String()+")")
	}
	t.Logf("view %s: init_net links: %s %v", label, strings.Join(names, " "), err)
	for _, p := range pods {
		devs, err := podDevices(p.NetNS)
		t.Logf("view %s: %s RDMA devices: %s %v", label, p.Name, devList(devs), err)
		l, err := guestkit.PodLink(p.NetNS, "rdma0")
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
