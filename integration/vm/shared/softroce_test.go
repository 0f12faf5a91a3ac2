package shared

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// srNIC is the podSoftRoCE NIC: veth0's peer, which has no RDMA device.
const srNIC = "veth1"

// TestSoftRoCEPerPod (scenario softroce): podSoftRoCE on veth1, at
// cniVersion 1.0.0, with IPv6 and IPv4 from host-local on the pods'
// children. Where the kernel serves it (7.3): two pods each get a macvlan
// child of veth1 and an rxe device of their own on it, named after the
// attachment, their addresses its GIDs; rping over IPv6 and IPv4 and
// perftest's ib_send_bw run between the pods' own devices (both devices'
// counters move, rxe0's do not); CHECK passes; DEL deletes each device,
// child and lease, also after the netns is gone; reconcile and uninstall
// give back a pod gone without DEL (softRoCEReleased); podSoftRoCE on
// veth0, rxe0's netdev, is refused with 112. Elsewhere (6.1, 6.12): ADD
// is refused with 112 naming Linux 7.1, leaving no child, device or
// record.
func TestSoftRoCEPerPod(t *testing.T) {
	testenv.VMGuest(t)
	serve, err := guestkit.SoftRoCEServed()
	if err != nil {
		t.Fatal(err)
	}
	ok := guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe)
	if !guestkit.Check(t, "mode-is-shared", func() error { return guestkit.ModeIs(rdma.ModeShared) }) || !ok {
		t.Fatal("the node could not be set up: no case runs")
	}
	c := guestkit.NewCalls(t, "1.0.0", "/run/rdma-chain-softroce")
	c.Conf(t, softRoCEEntry(c.DataDir, srNIC))
	if !serve {
		softRoCERefused(t, c, "7.1")
		return
	}
	softRoCEServes(t, c)
	c.Conf(t, softRoCEEntry(c.DataDir, parent))
	softRoCERefused(t, c, "rxe0")
}

func softRoCEEntry(dataDir, nic string) string {
	return `"mode":"shared","podSoftRoCE":"` + nic + `","podSelection":"all","dataDir":"` + dataDir + `",` +
		`"ipam":{"type":"host-local","dataDir":"/run/ipam-softroce","ranges":[[{"subnet":"fd00:78::/64"}],[{"subnet":"192.168.78.0/24"}]]}`
}

// softRoCERefused checks that ADD is 112 naming why, and leaves no
// child, RDMA device or record.
func softRoCERefused(t *testing.T, c *guestkit.Calls, why string) {
	before, err := ibDevices()
	if err != nil {
		t.Fatal(err)
	}
	p := guestkit.NewPod("softroce-", "refused")
	guestkit.ExpectCode(t, "add-refused-112", c.Add(t, p), 112, why)
	guestkit.Check(t, "refused-no-child", func() error { return guestkit.NoLink(p.NetNS, "rdma0") })
	guestkit.Check(t, "refused-no-record", func() error { return c.RecordCount(0) })
	guestkit.Check(t, "refused-no-rdma-device", func() error {
		now, err := ibDevices()
		if err == nil && !slices.Equal(now, before) {
			err = fmt.Errorf("RDMA devices %v, before %v", now, before)
		}
		return err
	})
	guestkit.ExpectOK(t, "refused-del", c.Del(t, p))
	guestkit.DelNetNS(t, p)
}

// softRoCEServes is the served part: two pods, their own devices, RoCE
// between them, DEL.
func softRoCEServes(t *testing.T, c *guestkit.Calls) {
	p1, p2 := guestkit.NewPod("softroce-", "sr1"), guestkit.NewPod("softroce-", "sr2")
	devs := map[string]string{}
	for n, p := range []pod{p1, p2} {
		devs[p.Name] = rdma.SoftRoCEName("rdmanet", p.ContainerID, "eth0")
		t0 := time.Now()
		if !guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p)) {
			t.Fatal("no pod: nothing else runs")
		}
		t.Logf("softroce-add %s: %d ms (chain ADD: ptp, host-local, rdma-chain)", p.Name, time.Since(t0).Milliseconds())
		guestkit.Check(t, "record-"+p.Name, func() error { return c.RecordCount(n + 1) })
		guestkit.Check(t, "macvlan-child-"+p.Name, func() error { return macvlanOf(p, srNIC) })
		guestkit.Check(t, "own-rxe-on-child-"+p.Name, func() error {
			return guestkit.InPod(p.NetNS, func() error { return guestkit.BoundTo(devs[p.Name], "rdma0") })
		})
		guestkit.Check(t, "addresses-are-gids-"+p.Name, func() error { return addrsAreGIDs(p, devs[p.Name]) })
		guestkit.ExpectOK(t, "check-"+p.Name, c.Check(t, p))
	}
	guestkit.Check(t, "nic-has-no-rdma-device", func() error { return noDeviceOn(srNIC) })
	for _, fam := range []string{"fd00:78::", "192.168.78."} {
		guestkit.Check(t, "rping-own-devices-"+strings.Trim(fam, ":."), func() error {
			return rpingOwn(t, p1, p2, devs[p1.Name], devs[p2.Name], fam)
		})
	}
	guestkit.Check(t, "ib-send-bw-own-devices", func() error { return sendBW(t, p1, p2, devs[p1.Name], devs[p2.Name]) })

	guestkit.ExpectOK(t, "del-"+p2.Name, c.Del(t, p2))
	guestkit.Check(t, "del-removes-rxe-"+p2.Name, func() error { return gone(devs[p2.Name]) })
	guestkit.Check(t, "del-removes-child-"+p2.Name, func() error { return guestkit.NoLink(p2.NetNS, "rdma0") })
	guestkit.Check(t, "del-removes-record-"+p2.Name, func() error { return c.RecordCount(1) })
	guestkit.ExpectOK(t, "del-again-"+p2.Name, c.Del(t, p2))
	guestkit.DelNetNS(t, p2)
	// The runtime's DEL after the pod's netns is gone.
	guestkit.DelNetNS(t, p1)
	guestkit.ExpectOK(t, "del-after-netns-gone-"+p1.Name, c.Del(t, p1))
	guestkit.Check(t, "del-removes-rxe-"+p1.Name, func() error { return gone(devs[p1.Name]) })
	guestkit.Check(t, "no-records-left", func() error { return c.RecordCount(0) })
	guestkit.Check(t, "no-leases-left", noLeases)
	softRoCEReleased(t, c)
	guestkit.Check(t, "rxe0-intact", func() error { return guestkit.DeviceOn(rxe, parent) })
}

// ibDevices lists the RDMA devices sysfs shows.
func ibDevices() ([]string, error) {
	es, err := os.ReadDir("/sys/class/infiniband")
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

// gone checks that RDMA device dev is listed neither by sysfs nor by
// RDMA netlink.
func gone(dev string) error {
	if _, err := os.Stat("/sys/class/infiniband/" + dev); err == nil {
		return fmt.Errorf("RDMA device %s still in sysfs", dev)
	}
	if _, err := netlink.RdmaLinkByName(dev); err == nil {
		return fmt.Errorf("RDMA device %s still listed by RDMA netlink", dev)
	}
	return nil
}

// macvlanOf checks that p's rdma0 is a macvlan child of nic in bridge
// mode, with a MAC other than nic's.
func macvlanOf(p pod, nic string) error {
	parentLink, err := netlink.LinkByName(nic)
	if err != nil {
		return err
	}
	l, err := guestkit.PodLink(p.NetNS, "rdma0")
	if err != nil {
		return err
	}
	mv, ok := l.(*netlink.Macvlan)
	switch {
	case !ok || mv.Mode != netlink.MACVLAN_MODE_BRIDGE:
		return fmt.Errorf("rdma0 is %s %+v, want macvlan mode bridge", l.Type(), l)
	case l.Attrs().ParentIndex != parentLink.Attrs().Index:
		return fmt.Errorf("rdma0's parent is ifindex %d, %s is %d", l.Attrs().ParentIndex, nic, parentLink.Attrs().Index)
	case l.Attrs().HardwareAddr.String() == parentLink.Attrs().HardwareAddr.String():
		return fmt.Errorf("rdma0 has its parent's MAC %s", l.Attrs().HardwareAddr)
	}
	return nil
}

// noDeviceOn checks that no RDMA device's port 1 is bound to netdev in
// init_net.
func noDeviceOn(netdev string) error {
	devs, err := ibDevices()
	if err != nil {
		return err
	}
	for _, d := range devs {
		if got, err := guestkit.PortNetdev(d, 1); err == nil && got == netdev {
			return fmt.Errorf("RDMA device %s is on %s", d, netdev)
		}
	}
	return nil
}

// addrsAreGIDs checks that p's IPv6 and IPv4 addresses on rdma0 are RoCE
// v2 GIDs of its own device dev (the IPv4 one in its IPv4-mapped form).
func addrsAreGIDs(p pod, dev string) error {
	for _, prefix := range []string{"fd00:78::", "192.168.78."} {
		a, err := guestkit.PodAddr(p.NetNS, "rdma0", prefix)
		if err != nil {
			return err
		}
		if _, err := gidIndex(dev, a); err != nil {
			return err
		}
	}
	return nil
}

// gidIndex is the index of the RoCE v2 GID of dev's port 1 that holds
// address a; GIDs take a moment to follow an address.
func gidIndex(dev, a string) (idx int, err error) {
	want := guestkit.GIDOf(a)
	err = guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
		files, _ := filepath.Glob("/sys/class/infiniband/" + dev + "/ports/1/gids/*")
		for _, f := range files {
			g, rerr := os.ReadFile(f)
			if rerr != nil || strings.TrimSpace(string(g)) != want {
				continue // unused entries answer EINVAL
			}
			n := filepath.Base(f)
			typ, _ := os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/gid_attrs/types/" + n)
			if strings.TrimSpace(string(typ)) == "RoCE v2" {
				idx, _ = strconv.Atoi(n)
				return nil
			}
		}
		return fmt.Errorf("no RoCE v2 GID %s (%s) on %s", want, a, dev)
	})
	return idx, err
}

// hwCounters reads dev port 1's sent and received packets.
func hwCounters(dev string) (sent, rcvd uint64, err error) {
	for name, v := range map[string]*uint64{"sent_pkts": &sent, "rcvd_pkts": &rcvd} {
		b, rerr := os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name)
		if rerr != nil {
			return 0, 0, rerr
		}
		if *v, rerr = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); rerr != nil {
			return 0, 0, rerr
		}
	}
	return sent, rcvd, nil
}

// ownTraffic runs f and wants both pods' devices to have sent and
// received packets during it, and rxe0 none.
func ownTraffic(t *testing.T, what string, devs []string, f func() error) error {
	before := map[string][2]uint64{}
	for _, d := range append(slices.Clone(devs), rxe) {
		s, r, err := hwCounters(d)
		if err != nil {
			return err
		}
		before[d] = [2]uint64{s, r}
	}
	if err := f(); err != nil {
		return err
	}
	for _, d := range append(slices.Clone(devs), rxe) {
		s, r, err := hwCounters(d)
		if err != nil {
			return err
		}
		t.Logf("%s: %s sent_pkts %d -> %d, rcvd_pkts %d -> %d", what, d, before[d][0], s, before[d][1], r)
		moved := s > before[d][0] && r > before[d][1]
		if d == rxe && (s != before[d][0] || r != before[d][1]) {
			return fmt.Errorf("%s: rxe0 counted the pods' traffic", what)
		}
		if d != rxe && !moved {
			return fmt.Errorf("%s: %s's counters did not move", what, d)
		}
	}
	return nil
}

// rpingOwn runs rping from p2 to p1's address of family prefix, over
// their own devices.
func rpingOwn(t *testing.T, p1, p2 pod, dev1, dev2, prefix string) error {
	a, err := guestkit.PodAddr(p1.NetNS, "rdma0", prefix)
	if err != nil {
		return err
	}
	return ownTraffic(t, "rping "+a, []string{dev1, dev2}, func() error { return guestkit.Rping(t, dev1, p1, p2, a, 3) })
}

// sendBW runs perftest's ib_send_bw, 100 sends of 4 KiB, server on p1's
// device, client on p2's, between their IPv4 GIDs (perftest's own TCP
// exchange over p1's IPv4 on rdma0: bookworm's perftest makes it over
// IPv4 only), and logs its result. The figure may be 0.00: under TCG
// perftest's clock sampling can fail (integration/cluster's softRoCERuns);
// the packets moved are the proof.
func sendBW(t *testing.T, p1, p2 pod, dev1, dev2 string) error {
	a1, err := guestkit.PodAddr(p1.NetNS, "rdma0", "192.168.78.")
	if err != nil {
		return err
	}
	a2, err := guestkit.PodAddr(p2.NetNS, "rdma0", "192.168.78.")
	if err != nil {
		return err
	}
	i1, err := gidIndex(dev1, a1)
	if err != nil {
		return err
	}
	i2, err := gidIndex(dev2, a2)
	if err != nil {
		return err
	}
	args := func(p pod, dev string, idx int) []string {
		return []string{"netns", "exec", p.Name, "/usr/bin/ib_send_bw", "-d", dev, "-x", strconv.Itoa(idx), "-F", "-s", sendBWSize, "-n", "100", "-p", "18515"}
	}
	return ownTraffic(t, "ib_send_bw", []string{dev1, dev2}, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), sendBWTimeout)
		defer cancel()
		srv := exec.CommandContext(ctx, "/usr/sbin/ip", args(p1, dev1, i1)...)
		var srvOut guestkit.LockedBuffer
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			return err
		}
		ended := make(chan struct{})
		go func() { _ = srv.Wait(); close(ended) }()
		defer func() { cancel(); <-ended }()
		t0 := time.Now()
		out, try, err := sendBWClient(ctx, ended, append(args(p2, dev2, i2), a1))
		if err != nil {
			return fmt.Errorf("ib_send_bw client, try %d, %.1f s after the server's start: %w: %s / server: %s",
				try, time.Since(t0).Seconds(), err, out, srvOut.String())
		}
		t.Logf("ib_send_bw %s -> %s (%s GID %d -> %s GID %d), try %d, %.1f s after the server's start:\n%s",
			p2.Name, p1.Name, dev2, i2, dev1, i1, try, time.Since(t0).Seconds(), out)
		return nil
	})
}

// sendBWClient runs ib_send_bw's client (ip's args) until it prints a
// result row: again while the server is not listening yet ("Couldn't
// connect"), until the server ends or ctx does. It returns the last
// try's output and number.
func sendBWClient(ctx context.Context, srvEnded <-chan struct{}, args []string) (string, int, error) {
	for try := 1; ; try++ {
		b, err := exec.CommandContext(ctx, "/usr/sbin/ip", args...).CombinedOutput()
		out := string(b)
		if err == nil && !resultRow(out) {
			err = errors.New("exit 0 without a result row")
		}
		switch {
		case err == nil:
			return out, try, nil
		case ctx.Err() != nil:
			return out, try, fmt.Errorf("%w (%w)", err, ctx.Err())
		case !strings.Contains(out, "Couldn't connect"):
			return out, try, err
		}
		select {
		case <-srvEnded:
			return out, try, fmt.Errorf("%w, and the server ended", err)
		case <-ctx.Done():
			return out, try, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sendBWSize is sendBW's message size in bytes, the first column of its
// result row.
const sendBWSize = "4096"

// resultRow reports whether perftest's output has a result row: the line
// after its "#bytes" header, starting with the message size.
func resultRow(out string) bool {
	_, after, ok := strings.Cut(out, "#bytes")
	if !ok {
		return false
	}
	lines := strings.SplitN(after, "\n", 3)
	if len(lines) < 2 {
		return false
	}
	f := strings.Fields(lines[1])
	return len(f) >= 4 && f[0] == sendBWSize
}

// sendBWTimeout bounds sendBW's server and all its client's tries, well
// within the scenario's boot (RC_VM_BOOT_TIMEOUT).
const sendBWTimeout = 2 * time.Minute
