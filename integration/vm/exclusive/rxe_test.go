package exclusive

import (
	"fmt"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// TestSoftRoCERefused is the exclusive scenario (its own boot, no
// simrdma): in exclusive netns mode soft-RoCE (rxe) cannot change netns,
// so ADD in "mode":"exclusive" fails with CNI error 102 naming rxe0 and
// leaves the node as it was; "mode":"shared" configured on an exclusive
// kernel fails with 101, and podSoftRoCE with 112. At cniVersion 0.4.0 and
// 1.0.0.
func TestSoftRoCERefused(t *testing.T) {
	testenv.VMGuest(t)
	// The switch works only while no netns but init_net exists.
	ok := guestkit.Check(t, "switch-to-exclusive", func() error {
		if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
			return fmt.Errorf("rdma system set netns exclusive: %w", err)
		}
		return guestkit.ModeIs(rdma.ModeExclusive)
	})
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) || !ok {
		t.Fatal("the node could not be set up: no case runs")
	}
	for _, v := range []string{"0.4.0", "1.0.0"} {
		t.Run("v"+v, func(t *testing.T) { rxeRefused(t, v) })
	}
	guestkit.Check(t, "mode-still-exclusive", func() error { return guestkit.ModeIs(rdma.ModeExclusive) })
}

func rxeRefused(t *testing.T, v string) {
	e := &env{Calls: guestkit.NewCalls(t, v, "/run/rdma-chain-excl-"+v)}
	e.Conf(t, `"mode":"exclusive","devices":["rxe0"],"podSelection":"all","dataDir":"`+e.DataDir+`"`)
	before, err := guestkit.PortView(rxe)
	if err != nil {
		t.Fatal(err)
	}
	p := guestkit.NewPod("excl-", "pod1")
	guestkit.ExpectCode(t, "add-code-102", e.Add(t, p), 102, rxe)
	// ptp ran before rdma-chain; libcni does not undo it, the runtime's
	// DEL does: the pod has lo and eth0, nothing of rdma-chain's.
	guestkit.Check(t, "pod-netns-only-lo-eth0", func() error { return podLinksAre(p, "eth0", "lo") })
	guestkit.Check(t, "rxe0-in-init-net", func() error { return guestkit.InInitNet(rxe) })
	guestkit.Check(t, "veth0-in-init-net", func() error {
		_, err := netlink.LinkByName("veth0")
		return err
	})
	guestkit.Check(t, "rxe0-still-on-veth0", func() error {
		now, err := guestkit.PortView(rxe)
		if err == nil && now != before {
			err = fmt.Errorf("%s now %q, before %q", rxe, now, before)
		}
		return err
	})
	guestkit.Check(t, "rxe0-not-in-pod", func() error {
		devs, err := podDevices(p.NetNS)
		if err == nil && len(devs) > 0 {
			err = fmt.Errorf("pod1 sees %s", devList(devs))
		}
		return err
	})
	guestkit.Check(t, "no-state-file", func() error { return e.RecordCount(0) })
	guestkit.ExpectOK(t, "del-after-failed-add", e.Del(t, p))
	guestkit.Check(t, "pod-clean-after-del", func() error { return podLinksAre(p, "lo") })

	// mode shared configured, kernel exclusive: 101
	e.Conf(t, `"mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"`+e.DataDir+`","sharedLink":{"type":"ipvlan","mode":"l2"}`)
	guestkit.ExpectCode(t, "shared-on-exclusive-101", e.AddTo(t, p), 101)
	guestkit.Check(t, "no-rdma0-after-101", func() error { return guestkit.NoLink(p.NetNS, "rdma0") })
	guestkit.ExpectOK(t, "del-after-101", e.Del(t, p))
	guestkit.Check(t, "no-state-file-after-101", func() error { return e.RecordCount(0) })

	// podSoftRoCE on veth1 (no RDMA device), kernel exclusive: 112, as an
	// rxe device made inside a netns cannot open its port there.
	e.Conf(t, `"podSoftRoCE":"veth1","podSelection":"all","dataDir":"`+e.DataDir+`"`)
	guestkit.ExpectCode(t, "soft-roce-on-exclusive-112", e.AddTo(t, p), 112, "exclusive")
	guestkit.Check(t, "no-rdma0-after-112", func() error { return guestkit.NoLink(p.NetNS, "rdma0") })
	guestkit.ExpectOK(t, "del-after-112", e.Del(t, p))
	guestkit.Check(t, "no-state-file-after-112", func() error { return e.RecordCount(0) })
	guestkit.DelNetNS(t, p)
}

// podLinksAre checks that p's netns has exactly the links names.
func podLinksAre(p pod, names ...string) error {
	slices.Sort(names)
	var got []string
	err := guestkit.InPod(p.NetNS, func() error {
		ls, err := nldump.LinkList(nil)
		for _, l := range ls {
			got = append(got, l.Attrs().Name)
		}
		return err
	})
	slices.Sort(got)
	if err == nil && !slices.Equal(got, names) {
		err = fmt.Errorf("links in %s: %q, want %q", p.Name, got, names)
	}
	return err
}
