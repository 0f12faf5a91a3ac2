package exclusive

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

type pod = guestkit.Pod

// env is one cniVersion's part: its conflist, state and pods.
type env struct {
	*guestkit.Calls
	b     base
	entry string // rdma-chain's fields without IPAM
	ipam  string // its IPAM
}

func newEnv(t *testing.T, v string, b base) *env {
	e := &env{Calls: guestkit.NewCalls(t, v, "/run/rdma-chain-xrdma-"+v)}
	e.b = b
	gw := ""
	if v == "1.1.0" {
		gw = `,"gateway":"fd00:99::1"`
	}
	e.ipam = `"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:99::/64"` + gw + `}]],"dataDir":"/run/ipam-xrdma-` + v + `"}`
	e.entry = `"mode":"exclusive","devices":["` + device + `"],"podSelection":"all","dataDir":"` + e.DataDir + `"`
	e.Conf(t, e.entry+","+e.ipam)
	t.Logf("cniVersion %s conflist: rdma-chain {%s,%s}", v, e.entry, e.ipam)
	return e
}

// hostRestored checks that eth0 and simrdma0 are back in init_net
// exactly as before.
func (e *env) hostRestored(t *testing.T, label string) {
	t.Helper()
	t.Run(label+"-restored", func(t *testing.T) {
		guestkit.Check(t, "nic", func() error {
			if err := nicSettled(); err != nil {
				return err
			}
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
				got, err := guestkit.NICView(nic)
				if err == nil && !slices.Equal(got, e.b.nic) {
					err = fmt.Errorf("eth0 differs from before: %s", guestkit.Diff(e.b.nic, got))
				}
				return err
			})
		})
		guestkit.Check(t, "device-in-init-net", func() error { return guestkit.InInitNet(device) })
		guestkit.Check(t, "device-on-eth0", func() error { return guestkit.DeviceOn(device, nic) })
		guestkit.Check(t, "host-gids-back", func() error {
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
				got, err := simGIDs("")
				if err == nil && !slices.Equal(got, e.b.gids) {
					err = fmt.Errorf("GIDs now %q, before %q", got, e.b.gids)
				}
				return err
			})
		})
		guestkit.Check(t, "no-record", func() error { return e.RecordCount(0) })
		guestkit.Check(t, "rxe0-untouched", e.rxeUntouched)
	})
}

func (e *env) rxeUntouched() error {
	v, err := guestkit.PortView(rxe)
	if err == nil && v != e.b.rxe {
		err = fmt.Errorf("%s now %q, before %q", rxe, v, e.b.rxe)
	}
	return err
}

// podHolds checks that the pod has rdma0 (the host name in its alias, the
// NIC's MAC) and simrdma0 bound to it; init_net sees neither.
func (e *env) podHolds(t *testing.T, label string, p pod) {
	t.Helper()
	t.Run(label+"-holds", func(t *testing.T) {
		l, lerr := guestkit.PodLink(p.NetNS, "rdma0")
		guestkit.Check(t, "rdma0-in-pod", func() error {
			if lerr == nil && l.Attrs().HardwareAddr.String() != e.b.mac {
				lerr = fmt.Errorf("rdma0 has MAC %s, eth0 had %s", l.Attrs().HardwareAddr, e.b.mac)
			}
			return lerr
		})
		guestkit.Check(t, "alias-is-host-name", func() error {
			if lerr == nil && l.Attrs().Alias != nic {
				return fmt.Errorf("rdma0's alias %q, want %s", l.Attrs().Alias, nic)
			}
			return lerr
		})
		guestkit.Check(t, "device-in-pod", func() error {
			in, err := rdma.New().InNetns(device, p.NetNS)
			if err == nil && !in {
				err = fmt.Errorf("%s not in %s", device, p.Name)
			}
			return err
		})
		guestkit.Check(t, "device-on-rdma0", func() error {
			return guestkit.InPod(p.NetNS, func() error { return guestkit.DeviceOn(device, "rdma0") })
		})
		guestkit.Check(t, "init-net-without-device", func() error {
			has, err := guestkit.InitNetHas(device)
			if _, serr := os.Stat("/sys/class/infiniband/" + device); err == nil && (has || serr == nil) {
				err = fmt.Errorf("init_net sees %s (netlink: %v, sysfs: no error)", device, has)
			}
			return err
		})
		guestkit.Check(t, "init-net-without-nic", func() error {
			_, err := netlink.LinkByName(nic)
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			if err == nil {
				return fmt.Errorf("init_net has %s", nic)
			}
			return fmt.Errorf("init_net's %s: %w", nic, err)
		})
		guestkit.Check(t, "rxe0-untouched", e.rxeUntouched)
	})
}
