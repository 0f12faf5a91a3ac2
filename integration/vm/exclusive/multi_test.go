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

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const (
	multiNICs  = 4
	multiSock  = "/run/kubelet/pod-resources.sock"
	multiLease = "/run/ipam-multix"
)

// multiNIC is NIC i of the multi-exclusive boot: ethI, its device
// simrdmaI, its name in the pod rdmaI, its /64 fd00:aI::/64 and the
// start of the pod's address there (podIPv6Block ::f:0:c00/124).
type multiNIC struct{ eth, dev, pod, node, podPrefix string }

func multiNICList() []multiNIC {
	var out []multiNIC
	for i := range multiNICs {
		out = append(out, multiNIC{fmt.Sprintf("eth%d", i), fmt.Sprintf("simrdma%d", i), fmt.Sprintf("rdma%d", i),
			fmt.Sprintf("fd00:a%d::1/64", i), fmt.Sprintf("fd00:a%d::f:0:c0", i)})
	}
	return out
}

// TestMultiExclusive is the multi-exclusive scenario (its own boot, four
// virtio-net NICs, rc.simrdma=eth0,eth1,eth2,eth3): exclusive mode with
// four movable devices simrdma0..simrdma3, one on each NIC, each NIC with
// its own /64. The fake kubelet allocates all four to one pod: ADD moves
// the four NICs (as rdma0..rdma3) and the four devices into it, each
// interface gets its IPv6 from podIPv6Block in its own NIC's /64 and a GID
// of its own device in the pod; DEL gives all four NICs (as they were:
// name, MTU, MAC, flags, addresses, routes) and devices back to init_net,
// and no record or lease is left.
func TestMultiExclusive(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	nics := multiNICList()
	if !guestkit.Check(t, "switch-to-exclusive", exclusiveMode) || !guestkit.Check(t, "four-devices", func() error { return fourDevices(nics) }) {
		t.FailNow()
	}
	views(t, "before-add")
	before, err := multiView(nics)
	mustDo(t, "the NICs before ADD", err)
	t.Logf("NICs before ADD: %q", before)
	var kubelet *fakekubelet.Server
	if !guestkit.Check(t, "kubelet-up", func() (err error) {
		if err = os.MkdirAll("/run/kubelet", 0o755); err == nil {
			kubelet, err = fakekubelet.Start(multiSock, []fakekubelet.Pod{{Namespace: "default", Name: "x1",
				Resources: map[string][]string{"rdma/hca": {"simrdma0", "simrdma1", "simrdma2", "simrdma3"}}}})
		}
		if err == nil {
			_, err = os.Stat(multiSock)
		}
		return err
	}) {
		t.FailNow()
	}
	defer kubelet.Stop()
	e := &env{Calls: guestkit.NewCalls(t, "1.0.0", "/run/rdma-chain-multix")}
	e.Conf(t, `"mode":"exclusive","podSelection":"requested","podResourcesSocket":"`+multiSock+`","resourceNames":["rdma/hca"],`+
		`"dataDir":"`+e.DataDir+`","podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","dataDir":"`+multiLease+`"}`)
	p := guestkit.NewPod("xrdma-", "x1")
	if !guestkit.ExpectOK(t, "add-x1-four-devices", e.Add(t, p)) {
		t.FailNow()
	}
	for _, n := range nics {
		podHoldsNIC(t, p, n)
	}
	guestkit.Check(t, "leases-taken", func() error { return leaseCount(multiNICs) })
	views(t, "after-add", p)
	guestkit.ExpectOK(t, "del-x1", e.Del(t, p))
	guestkit.Check(t, "four-back-in-init-net", func() error {
		for _, n := range nics {
			if err := guestkit.BoundTo(n.dev, n.eth); err != nil {
				return err
			}
		}
		return guestkit.Poll(20*time.Second, 200*time.Millisecond, func() error { return sameView(before, func() ([]string, error) { return multiView(nics) }) })
	})
	guestkit.Check(t, "no-records-left", func() error { return e.RecordCount(0) })
	guestkit.Check(t, "leases-released", func() error { return leaseCount(0) })
	views(t, "after-del")
	guestkit.DelNetNS(t, p)
	t.Logf("multi-exclusive: %.0f s", time.Since(start).Seconds())
}

// fourDevices binds each NIC's device to it in init_net and brings each
// NIC up with its /64 (no DAD), settled. The NIC keeps that address from
// an earlier scenario of the boot (its DEL gave the NIC back as it was),
// so it is added only where it is missing.
func fourDevices(nics []multiNIC) error {
	var errs []error
	for _, n := range nics {
		errs = append(errs, guestkit.BoundTo(n.dev, n.eth))
		l, err := netlink.LinkByName(n.eth)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err == nil {
			err = guestkit.AddrOnce(n.eth, n.node)
		}
		if err == nil {
			err = guestkit.WaitSettled(n.eth)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leaseCount checks that n of host-local's leases are of the NICs'
// /64s.
func leaseCount(n int) error {
	fs, err := guestkit.Files(multiLease)
	fs = slices.DeleteFunc(fs, func(s string) bool { return !strings.Contains(s, "/rdmanet/fd00:a") })
	if err == nil && len(fs) != n {
		err = fmt.Errorf("%d leases, want %d: %q", len(fs), n, fs)
	}
	return err
}

// multiView is every NIC's nicView.
func multiView(nics []multiNIC) ([]string, error) {
	var out []string
	for _, n := range nics {
		v, err := guestkit.NICView(n.eth)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

// podHoldsNIC checks that NIC n moved into the pod as n.pod with its
// address from the pod's block in its own /64, its device in the pod
// bound to it and gone from init_net, and that address a GID of the
// device in the pod.
func podHoldsNIC(t *testing.T, p pod, n multiNIC) {
	t.Helper()
	var addr net.IP
	guestkit.Check(t, "moved-"+n.eth+"-as-"+n.pod, func() error {
		var nf netlink.LinkNotFoundError
		if _, err := netlink.LinkByName(n.eth); err == nil {
			return fmt.Errorf("%s still in init_net after ADD", n.eth)
		} else if !errors.As(err, &nf) {
			return fmt.Errorf("%s in init_net: %w", n.eth, err)
		}
		if _, err := guestkit.PodLink(p.NetNS, n.pod); err != nil {
			return fmt.Errorf("%s in %s: %w", n.pod, p.Name, err)
		}
		var all []string
		for _, a := range netnstest.GlobalV6(t, nsOf(t, p), n.pod) {
			all = append(all, a)
			if ip, ipn, err := net.ParseCIDR(a); err == nil && strings.HasPrefix(a, n.podPrefix) {
				if ones, _ := ipn.Mask.Size(); ones == 124 {
					addr = ip
					return nil
				}
			}
		}
		return fmt.Errorf("%s in %s has no %s.../124 address: %q", n.pod, p.Name, n.podPrefix, all)
	})
	guestkit.Check(t, "device-"+n.dev+"-in-pod", func() error {
		if err := guestkit.InPod(p.NetNS, func() error { return guestkit.BoundTo(n.dev, n.pod) }); err != nil {
			return err
		}
		has, err := guestkit.InitNetHas(n.dev)
		if err == nil && has {
			err = fmt.Errorf("init_net still lists %s after ADD", n.dev)
		}
		return err
	})
	guestkit.Check(t, "gid-"+n.pod, func() error {
		if addr == nil {
			return errors.New("no address to look for")
		}
		return pollGIDs(n.dev, p.NetNS, gidOf(addr)+" "+n.pod+" RoCE v2")
	})
}
