package exclusive

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

type pod = guestkit.Pod

// env is one cniVersion's part: its conflist, state and pods.
type env struct {
	v       string
	b       base
	c       *guestkit.Chain
	dataDir string
	entry   string // rdma-chain's fields without IPAM
	ipam    string // its IPAM
	list    *libcni.NetworkConfigList
}

func newEnv(t *testing.T, v string, b base) *env {
	e := chainEnv(t, v, "/run/rdma-chain-xrdma-"+v)
	e.b = b
	gw := ""
	if v == "1.1.0" {
		gw = `,"gateway":"fd00:99::1"`
	}
	e.ipam = `"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:99::/64"` + gw + `}]],"dataDir":"/run/ipam-xrdma-` + v + `"}`
	e.entry = `"mode":"exclusive","devices":["` + device + `"],"podSelection":"all","dataDir":"` + e.dataDir + `"`
	e.conf(t, e.entry+","+e.ipam)
	t.Logf("cniVersion %s conflist: rdma-chain {%s,%s}", v, e.entry, e.ipam)
	return e
}

// chainEnv is a chain at cniVersion v with its state in dataDir; when t
// ends, every named netns and the state are removed.
func chainEnv(t *testing.T, v, dataDir string) *env {
	e := &env{v: v, c: guestkit.NewChain(binDir), dataDir: dataDir}
	t.Cleanup(func() {
		paths, _ := os.ReadDir(nsDir)
		for _, p := range paths {
			_ = guestkit.DeleteNetNS(nsDir + "/" + p.Name())
		}
		_ = os.RemoveAll(e.dataDir)
	})
	return e
}

// conf makes the conflist of rdma-chain's fields the one the next calls use.
func (e *env) conf(t *testing.T, fields string) {
	t.Helper()
	l, err := guestkit.Conflist(e.v, fields)
	if err != nil {
		t.Fatalf("conflist %s {%s}: %v", e.v, fields, err)
	}
	e.list = l
}

func newPod(name string) pod {
	return pod{Name: name, NetNS: nsDir + "/" + name, ContainerID: "xrdma-" + name}
}

// netns pins a new netns at p's path.
func netns(t *testing.T, p pod) {
	t.Helper()
	if err := guestkit.NewNetNS(p.NetNS); err != nil {
		t.Fatal(err)
	}
}

func delNetns(t *testing.T, p pod) {
	t.Helper()
	if err := guestkit.DeleteNetNS(p.NetNS); err != nil {
		t.Error(err)
	}
}

// logged logs one call and the plugin's log lines of it, as a runtime's
// log would, and returns its error.
func (e *env) logged(t *testing.T, verb string, p pod, err error) error {
	t.Helper()
	t.Logf("%s %s (%s) -> %v", verb, p.Name, e.v, err)
	for _, l := range strings.Split(strings.TrimSpace(string(e.c.Stderr)), "\n") {
		if l != "" {
			t.Logf("  | %s", l)
		}
	}
	return err
}

// add is a new netns for p and the runtime's ADD.
func (e *env) add(t *testing.T, p pod) error {
	t.Helper()
	netns(t, p)
	return e.addTo(t, p)
}

// addTo is the runtime's ADD into p's existing netns.
func (e *env) addTo(t *testing.T, p pod) error {
	t.Helper()
	return e.logged(t, "ADD", p, e.c.Add(e.list, p))
}

func (e *env) del(t *testing.T, p pod) error {
	t.Helper()
	return e.logged(t, "DEL", p, e.c.Del(e.list, p))
}

// gone is DEL, then p's netns removed.
func (e *env) gone(t *testing.T, p pod) error {
	t.Helper()
	err := e.del(t, p)
	delNetns(t, p)
	return err
}

// check is the whole chain's CHECK.
func (e *env) check(t *testing.T, p pod) error {
	t.Helper()
	return e.logged(t, "CHECK", p, e.c.Check(e.list, p))
}

// checkOwn is the CHECK of rdma-chain alone, to read its own error codes.
func (e *env) checkOwn(t *testing.T, p pod) error {
	t.Helper()
	only, err := guestkit.Only(e.list, guestkit.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return e.logged(t, "CHECK rdma-chain", p, e.c.Check(only, p))
}

func expectOK(t *testing.T, name string, err error) bool {
	t.Helper()
	return check(t, name, func() error { return err })
}

// expectCode: the call failed with CNI error code and its message or
// details mention every word.
func expectCode(t *testing.T, name string, err error, code uint, words ...string) {
	t.Helper()
	check(t, name, func() error {
		if err == nil {
			return fmt.Errorf("succeeded, wanted CNI error %d", code)
		}
		ce, ok := guestkit.CNIError(err)
		if !ok {
			return fmt.Errorf("no CNI error, want code %d: %w", code, err)
		}
		if ce.Code != code {
			return fmt.Errorf("CNI error code %d, want %d: %w", ce.Code, code, err)
		}
		for _, w := range words {
			if !strings.Contains(ce.Msg+" "+ce.Details, w) {
				return fmt.Errorf("error does not mention %q: %w", w, err)
			}
		}
		return nil
	})
}

// hostRestored: eth0 and simrdma0 back in init_net exactly as before.
func (e *env) hostRestored(t *testing.T, label string) {
	t.Helper()
	t.Run(label+"-restored", func(t *testing.T) {
		check(t, "nic", func() error {
			if err := nicSettled(); err != nil {
				return err
			}
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
				got, err := nicView(nic)
				if err == nil && !slices.Equal(got, e.b.nic) {
					err = fmt.Errorf("eth0 differs from before: %s", guestkit.Diff(e.b.nic, got))
				}
				return err
			})
		})
		check(t, "device-in-init-net", func() error { return inInitNet(device) })
		check(t, "device-on-eth0", func() error { return deviceOn(device, nic) })
		check(t, "host-gids-back", func() error {
			return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
				got, err := simGIDs("")
				if err == nil && !slices.Equal(got, e.b.gids) {
					err = fmt.Errorf("GIDs now %q, before %q", got, e.b.gids)
				}
				return err
			})
		})
		check(t, "no-record", func() error { return recordCount(e.dataDir, 0) })
		check(t, "rxe0-untouched", e.rxeUntouched)
	})
}

func (e *env) rxeUntouched() error {
	v, err := rxeView()
	if err == nil && v != e.b.rxe {
		err = fmt.Errorf("%s now %q, before %q", rxe, v, e.b.rxe)
	}
	return err
}

// podHolds: the pod has rdma0 (the host name in its alias, the NIC's MAC)
// and simrdma0 bound to it; init_net sees neither.
func (e *env) podHolds(t *testing.T, label string, p pod) {
	t.Helper()
	t.Run(label+"-holds", func(t *testing.T) {
		l, lerr := podLink(p.NetNS, "rdma0")
		check(t, "rdma0-in-pod", func() error {
			if lerr == nil && l.Attrs().HardwareAddr.String() != e.b.mac {
				lerr = fmt.Errorf("rdma0 has MAC %s, eth0 had %s", l.Attrs().HardwareAddr, e.b.mac)
			}
			return lerr
		})
		check(t, "alias-is-host-name", func() error {
			if lerr == nil && l.Attrs().Alias != nic {
				return fmt.Errorf("rdma0's alias %q, want %s", l.Attrs().Alias, nic)
			}
			return lerr
		})
		check(t, "device-in-pod", func() error {
			in, err := rdma.New().InNetns(device, p.NetNS)
			if err == nil && !in {
				err = fmt.Errorf("%s not in %s", device, p.Name)
			}
			return err
		})
		check(t, "device-on-rdma0", func() error { return inPod(p.NetNS, func() error { return deviceOn(device, "rdma0") }) })
		check(t, "init-net-without-device", func() error {
			has, err := initNetHas(device)
			if _, serr := os.Stat("/sys/class/infiniband/" + device); err == nil && (has || serr == nil) {
				err = fmt.Errorf("init_net sees %s (netlink: %v, sysfs: no error)", device, has)
			}
			return err
		})
		check(t, "init-net-without-nic", func() error {
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
		check(t, "rxe0-untouched", e.rxeUntouched)
	})
}

// cniResult is the result the plugin printed.
type cniResult struct {
	Interfaces []map[string]any `json:"interfaces"`
	IPs        []struct {
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
		Interface *int   `json:"interface"`
	} `json:"ips"`
}

// result decodes what the plugin printed on its last run.
func (e *env) result() (cniResult, error) {
	var r cniResult
	if err := json.Unmarshal(e.c.Stdout, &r); err != nil {
		return r, fmt.Errorf("the plugin's result %q: %w", e.c.Stdout, err)
	}
	return r, nil
}

// iface is the index and object of the result's interface name.
func (r cniResult) iface(name string) (int, map[string]any) {
	for i, f := range r.Interfaces {
		if f["name"] == name {
			return i, f
		}
	}
	return -1, nil
}

// resultShape: the plugin's last result has rdma0's entry in p's sandbox
// with its MAC, no fd00: address in "ips" (rdma0's addresses are listed
// only with reportIPs), and at 1.1.0 rdma0's MTU as in the pod and pciID
// pci (none when pci is empty); below 1.1.0 neither.
func (e *env) resultShape(t *testing.T, name string, p pod, pci string) {
	t.Helper()
	t.Logf("%s: result at %s: %s", name, e.v, e.c.Stdout)
	r, rerr := e.result()
	_, f := r.iface("rdma0")
	l, lerr := podLink(p.NetNS, "rdma0")
	t.Run(name, func(t *testing.T) {
		if err := errors.Join(rerr, lerr); err != nil {
			t.Fatal(err)
		}
		check(t, "rdma0-entry", func() error { return want(f, "sandbox", p.NetNS) })
		check(t, "rdma0-mac", func() error { return want(f, "mac", l.Attrs().HardwareAddr.String()) })
		check(t, "no-rdma0-ips", func() error {
			for _, ip := range r.IPs {
				if strings.HasPrefix(ip.Address, "fd00:") {
					return fmt.Errorf("rdma0's address listed in ips: %s", e.c.Stdout)
				}
			}
			return nil
		})
		check(t, "mtu-pciid", func() error { return e.mtuPCI(f, l.Attrs().MTU, pci) })
	})
}

func (e *env) mtuPCI(f map[string]any, mtu int, pci string) error {
	if e.v != "1.1.0" {
		if _, m := f["mtu"]; m {
			return fmt.Errorf("%s rdma0 entry %v has 1.1.0's mtu", e.v, f)
		}
		if _, p := f["pciID"]; p {
			return fmt.Errorf("%s rdma0 entry %v has 1.1.0's pciID", e.v, f)
		}
		return nil
	}
	if err := want(f, "mtu", float64(mtu)); err != nil {
		return err
	}
	if pci == "" {
		if _, p := f["pciID"]; p {
			return fmt.Errorf("rdma0 entry %v has a pciID, the device has no PCI address", f)
		}
		return nil
	}
	return want(f, "pciID", pci)
}

// want: the result object f has key with value v.
func want(f map[string]any, key string, v any) error {
	if f == nil {
		return errors.New("no rdma0 entry in the result")
	}
	if got, ok := f[key]; !ok || got != v {
		return fmt.Errorf("rdma0 entry %v: %s %v, want %v", f, key, got, v)
	}
	return nil
}
