package ops

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	nic    = "eth0"     // the virtio-net NIC simrdma0 is bound to
	simdev = "simrdma0" // its RDMA device, movable
)

// nicAddrs are the addresses guestkit.SetUpNIC gives the NIC.
var nicAddrs = []string{"192.168.88.1/24", "fd00:88::1/64"}

// excl is one exclusive-mode scenario's pod and what it learnt of it.
type excl struct {
	c       *guestkit.Calls
	pod     guestkit.Pod
	netDir  string
	ipamDir string // the pod's IPv6 leases (host-local's dataDir)
	mac     string // the NIC's
	v6      string // rdma0's address, read in the pod
}

// TestOpsExclusive (scenario ops-exclusive, its own boot with a second
// NIC and rc.simrdma=eth0): inspect and reconcile in exclusive mode with
// the movable simrdma0 bound to the virtio-net NIC eth0. A pod gets the
// NIC (as rdma0) and the device; inspect shows the attachment healthy
// and inspect --netns the pod's rdma0 with its GIDs as the pod netns sees
// them; the pod netns is then deleted behind the plugin's back (the
// kernel returns both to init_net) and reconcile --once without CRI
// releases the attachment: the NIC is eth0 again as it was (addresses,
// MTU, routes), simrdma0 on it, the record and the lease gone.
func TestOpsExclusive(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	ok := guestkit.Check(t, "switch-to-exclusive", toExclusive)
	ok = guestkit.Check(t, "simrdma0-registered", func() error { return guestkit.InInitNet(simdev) }) && ok
	if !guestkit.Check(t, "nic-setup", nicSetUp) || !ok {
		t.Fatal("the node could not be set up: no case runs")
	}
	e := newExcl(t, "opsx", "/run/rdma-chain-opsx", "/run/ipam-opsx", "fd00:99::/64")
	before, err := guestkit.NICView(nic)
	if err != nil {
		t.Fatalf("eth0 before any pod: %v", err)
	}
	t.Logf("eth0 before any pod: %q", before)
	v := guestkit.RunOps(t, "validate", nil, "validate", e.conf(), "--cni-bin-dir", cniBinDir)
	guestkit.Check(t, "validate-ok", func() error { return v.Exit(0) })

	e.pod = guestkit.NewPod("opsx-", "xpod1")
	guestkit.ExpectOK(t, "add-xpod1", e.c.Add(t, e.pod))
	e.v6 = podV6(t, e.pod, "fd00:99:")
	gid := guestkit.GIDOf(e.v6)
	// the GID of the pod's address, in the pod netns's own sysfs
	guestkit.Check(t, "pod-gid", func() error {
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return podHasGID(e.pod.NetNS, gid) })
	})
	e.inspectHeld(t, gid)

	// The pod netns goes behind the plugin's back: the kernel returns the
	// device and the NIC (under the name it had in the pod) to init_net.
	guestkit.DelNetNS(t, e.pod)
	guestkit.Check(t, "refunded", func() error {
		return guestkit.Poll(20*time.Second, 100*time.Millisecond, func() error {
			_, err := linkWithMAC(e.mac)
			return errors.Join(guestkit.InInitNet(simdev), err)
		})
	})
	t.Logf("init_net links after the netns went: %s", initNetLinks())
	st := inspect(t, "inspect-stale", nil, "--data-dir", e.c.DataDir)
	guestkit.Check(t, "inspect-stale", func() error { return st.stale("default/xpod1", e.pod.NetNS) })

	rc := guestkit.RunOps(t, "reconcile", nil, "reconcile", "--conflist", e.conf(), "--cni-bin-dir", cniBinDir, "--once")
	guestkit.Check(t, "reconcile-released", func() error {
		return released(rc, "released an attachment", "(pod default/xpod1, exclusive, moved simrdma0 as rdma0)", e.pod.NetNS,
			map[string]string{"released": "1", "kept": "0", "problems": "0", "liveness": "netns"})
	})
	guestkit.Check(t, "reconcile-exit", func() error { return rc.Exit(0) })
	e.released(t, before)
	after := inspect(t, "inspect-after", nil, "--data-dir", e.c.DataDir)
	guestkit.Check(t, "inspect-after", func() error { return deviceBack(after) })
	guestkit.Check(t, "inspect-after-exit", func() error { return after.exit(0) })
	t.Logf("ops-exclusive: %.0f s", time.Since(start).Seconds())
}

// toExclusive switches the RDMA netns mode to exclusive unless an
// earlier scenario of this boot did (the switch works only while no netns
// but init_net exists).
func toExclusive() error {
	if guestkit.ModeIs(rdma.ModeExclusive) == nil {
		return nil
	}
	if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
		return fmt.Errorf("rdma system set netns exclusive: %w", err)
	}
	return guestkit.ModeIs(rdma.ModeExclusive)
}

// nicSetUp sets up eth0 as a node has it (addresses, MTU, routes) unless
// an earlier scenario of this boot did, and waits until its carrier is
// up and DAD is done: until then its GIDs and local routes are not
// final, and a reading of it is not the one a release must give back.
func nicSetUp() error {
	if hasAddrs(nic, nicAddrs...) != nil {
		if err := guestkit.SetUpNIC(nic); err != nil {
			return err
		}
	}
	return guestkit.WaitSettled(nic)
}

// newExcl is a scenario's chain: ptp + host-local and rdma-chain in
// exclusive mode on simrdma0 with rdma0's IPv6 from host-local in
// subnet, in /etc/cni/net.d-NAME/rdmanet.conflist.
func newExcl(t *testing.T, name, dataDir, ipamDir, subnet string) *excl {
	e := &excl{c: guestkit.NewCalls(t, "1.0.0", dataDir), netDir: "/etc/cni/net.d-" + name, ipamDir: ipamDir}
	if l, err := netlink.LinkByName(nic); err == nil {
		e.mac = l.Attrs().HardwareAddr.String()
	}
	list, err := guestkit.Conflist("1.0.0", `"mode":"exclusive","devices":["simrdma0"],"podSelection":"all","dataDir":"`+dataDir+
		`","ipam":{"type":"host-local","ranges":[[{"subnet":"`+subnet+`"}]],"dataDir":"`+ipamDir+`"}`)
	if err != nil || !writeConflist(t, e.c, e.conf(), list.Bytes) {
		t.Fatalf("no conflist (%v): no case runs", err)
	}
	return e
}

func (e *excl) conf() string { return e.netDir + "/rdmanet.conflist" }

// podV6 is p's rdma0 address starting with prefix, read in the pod (the result
// lists it only with reportIPs), or "".
func podV6(t *testing.T, p guestkit.Pod, prefix string) string {
	t.Helper()
	a, err := guestkit.PodAddr(p.NetNS, "rdma0", prefix)
	if err != nil {
		t.Logf("%s rdma0: %v", p.Name, err)
		return ""
	}
	t.Logf("%s rdma0 %s", p.Name, a)
	return a
}

// inspectHeld checks that, while the pod holds them, inspect shows the
// attachment healthy and neither the device in init_net, and inspect
// --netns the pod's rdma0 (the NIC's MAC, its address) with the GID of
// its address as the pod sees simrdma0.
func (e *excl) inspectHeld(t *testing.T, gid string) {
	in := inspect(t, "inspect", nil, "--data-dir", e.c.DataDir)
	link := fmt.Sprintf("link simrdma0 moved as rdma0 (host eth0) ips %s/64 step done", e.v6)
	guestkit.Check(t, "inspect-exclusive", func() error {
		err := in.text.Has("RDMA netns mode: exclusive", "pod default/xpod1  exclusive  netns "+e.pod.NetNS, link, "    healthy")
		if err != nil {
			return err
		}
		return e.holds(in)
	})
	guestkit.Check(t, "inspect-exit", func() error { return in.exit(0) })
	guestkit.Check(t, "inspect-device-not-on-host", func() error {
		if err := in.text.Lacks("  simrdma0  driver"); err != nil {
			return err
		}
		if _, err := in.device(simdev); err == nil {
			return errors.New("inspect --json lists simrdma0 in init_net while the pod holds it")
		}
		if guestkit.InInitNet(simdev) == nil {
			return errors.New("init_net's RDMA netlink lists simrdma0 while the pod holds it")
		}
		return nil
	})
	ns := inspect(t, "inspect-netns", nil, "--data-dir", e.c.DataDir, "--netns", e.pod.NetNS)
	guestkit.Check(t, "inspect-netns", func() error {
		err := ns.text.Has("Netns "+e.pod.NetNS+":", "  rdma0 ", e.mac+"  [RDMA]", "    inet "+e.v6+"/64",
			"    GID simrdma0 port 1 index ", " "+gid+" RoCE v2")
		if err != nil {
			return err
		}
		i, err := ns.netnsIface(e.pod.NetNS, "rdma0")
		if err != nil {
			return err
		}
		if i.MAC != e.mac || !i.RDMA || !slices.Contains(i.Addrs, e.v6+"/64") {
			return fmt.Errorf("rdma0 in xpod1 %+v; want MAC %s, RDMA, %s/64", i, e.mac, e.v6)
		}
		return hasGID(i, simdev, gid)
	})
	guestkit.Check(t, "inspect-netns-exit", func() error { return ns.exit(0) })
}

// holds checks that inspect --json has exclusive mode and the pod's
// attachment: simrdma0 moved with eth0 as rdma0 and its address,
// healthy.
func (e *excl) holds(in inspected) error {
	a, err := in.attachment("default/xpod1")
	if err != nil {
		return err
	}
	if in.r.RDMA.Mode != "exclusive" || a.Mode != "exclusive" || a.NetNS != e.pod.NetNS || !a.Healthy || len(a.Links) != 1 {
		return fmt.Errorf("mode %q, xpod1's attachment %+v; want exclusive, netns %s, healthy, one link", in.r.RDMA.Mode, a, e.pod.NetNS)
	}
	l := a.Links[0]
	if l.Device != simdev || l.Kind != "moved" || l.PodName != "rdma0" || l.Host != nic || l.Step != "done" ||
		!slices.Equal(l.IPs, []string{e.v6 + "/64"}) {
		return fmt.Errorf("xpod1's link %+v; want simrdma0 moved as rdma0 from eth0 with %s/64, step done", l, e.v6)
	}
	return nil
}

// released checks that, after reconcile's release, the NIC is eth0
// again with its MAC, its addresses and, once it settled, as before the
// pod (MTU, flags, routes); simrdma0 is on it; no record or lease is
// left.
func (e *excl) released(t *testing.T, before []string) {
	guestkit.Check(t, "nic-back-as-eth0", func() error {
		l, err := netlink.LinkByName(nic)
		if err == nil && l.Attrs().HardwareAddr.String() != e.mac {
			err = fmt.Errorf("eth0 has MAC %s, the NIC's is %s", l.Attrs().HardwareAddr, e.mac)
		}
		return err
	})
	guestkit.Check(t, "nic-addresses-back", func() error { return hasAddrs(nic, nicAddrs...) })
	guestkit.Check(t, "nic-as-before", func() error {
		if err := guestkit.WaitSettled(nic); err != nil {
			return err
		}
		return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
			got, err := guestkit.NICView(nic)
			if err == nil && !slices.Equal(got, before) {
				err = fmt.Errorf("eth0 differs from before the pod: %s", guestkit.Diff(before, got))
			}
			return err
		})
	})
	guestkit.Check(t, "device-on-eth0", func() error { return guestkit.BoundTo(simdev, nic) })
	guestkit.Check(t, "no-records-left", func() error { return e.c.RecordCount(0) })
	guestkit.Check(t, "lease-gone", func() error { return guestkit.LeaseGone(e.ipamDir, e.v6) })
}

// deviceBack checks that inspect lists simrdma0 in init_net on eth0
// with port 1 ACTIVE, and no attachment.
func deviceBack(in inspected) error {
	if err := in.text.Has("  simrdma0  driver ", "netdev eth0  netns host  port 1 ACTIVE", "Attachments (0):"); err != nil {
		return err
	}
	d, err := in.device(simdev)
	if err != nil {
		return err
	}
	if d.Netdev != nic || d.Netns != "host" || len(d.Ports) == 0 || d.Ports[0].Port != 1 || d.Ports[0].State != "ACTIVE" {
		return fmt.Errorf("simrdma0 %+v; want on eth0 in host, port 1 ACTIVE", d)
	}
	if len(in.r.Attachments) != 0 {
		return fmt.Errorf("attachments left: %+v", in.r.Attachments)
	}
	return nil
}

// podHasGID checks that the netns at path sees gid on simrdma0 port 1.
func podHasGID(path, gid string) error {
	gs, err := rdma.GIDsIn(path)
	if err != nil {
		return fmt.Errorf("GIDs seen from %s: %w", path, err)
	}
	if !slices.ContainsFunc(gs, func(g rdma.GID) bool { return g.Device == simdev && g.Port == 1 && g.GID == gid }) {
		return fmt.Errorf("no GID %s of simrdma0 seen from %s: %s", gid, path, guestkit.GIDList(gs))
	}
	return nil
}

// linkWithMAC is init_net's link with mac, whatever its name.
func linkWithMAC(mac string) (netlink.Link, error) {
	ls, err := nldump.LinkList(nil)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		if l.Attrs().HardwareAddr.String() == mac {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no link with MAC %s in init_net", mac)
}

// initNetLinks names init_net's links with their MACs, for the log.
func initNetLinks() string {
	ls, err := nldump.LinkList(nil)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s(%s)", l.Attrs().Name, l.Attrs().HardwareAddr))
	}
	return strings.Join(out, " ")
}
