package netdev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const sharedMAC = "02:00:00:00:aa:01"

// setMAC gives link name in the host the MAC mac.
func (e *env) setMAC(t *testing.T, name, mac string) {
	t.Helper()
	h := handle(t, e.host)
	l, err := h.LinkByName(name)
	if err == nil {
		hw, _ := net.ParseMAC(mac)
		err = h.LinkSetHardwareAddr(l, hw)
	}
	if err != nil {
		t.Fatalf("set MAC of %s: %v", name, err)
	}
}

// withoutIdentity is hl as records written before state.HostLink carried the
// host netns cookie, the permanent address and the kind.
func withoutIdentity(hl state.HostLink) state.HostLink {
	hl.HostNetns, hl.PermMAC, hl.LinkKind = 0, "", ""
	return hl
}

// masters are the netns-local kinds the failed-move case builds: a bridge
// here, and a bond where the kernel has bonding (the VM tier sets
// RC_NETDEV_BOND=1 in its guests; this host's kernel has no bonding).
func masters() []string {
	if os.Getenv("RC_NETDEV_BOND") == "1" {
		return []string{"bridge", "bond"}
	}
	return []string{"bridge"}
}

// addMaster creates master0, a kind link, with two veth ports (slaves)
// carrying its MAC, up.
func (e *env) addMaster(t *testing.T, kind string) {
	t.Helper()
	h := handle(t, e.host)
	attrs := netlink.LinkAttrs{Name: "master0", MTU: rdmaMTU}
	var m netlink.Link = &netlink.Bridge{LinkAttrs: attrs}
	if kind == "bond" {
		b := netlink.NewLinkBond(attrs)
		b.Mode = netlink.BOND_MODE_ACTIVE_BACKUP
		m = b
	}
	if err := h.LinkAdd(m); err != nil {
		t.Fatalf("add %s: %v", kind, err)
	}
	e.setMAC(t, "master0", sharedMAC)
	for i, port := range []string{"port0", "port1"} {
		l := addVeth(t, e.host, port, e.peer, "mpeer"+port[4:])
		e.setMAC(t, port, sharedMAC)
		if err := h.LinkSetMasterByIndex(l, m.Attrs().Index); err != nil {
			t.Fatalf("enslave port %d: %v", i, err)
		}
	}
	if err := h.LinkSetUp(m); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreNeverMoved is the failed ADD of a netdev the kernel keeps in
// its netns: a bridge or bond whose two ports carry its MAC. The move fails
// (EINVAL, nothing moved) and the undo, RestoreToHost, must find it among
// the three links with that MAC and leave it as it was.
func TestRestoreNeverMoved(t *testing.T) {
	testenv.Privileged(t)
	for _, kind := range masters() {
		for _, rec := range []string{"described", "without identity"} {
			t.Run(kind+"/"+rec, func(t *testing.T) {
				e := newEnv(t)
				e.addMaster(t, kind)
				before := snap(t, e.host, "master0")
				var hl state.HostLink
				if err := e.inHost(func() (err error) { hl, err = Describe("master0", podIf); return err }); err != nil {
					t.Fatalf("Describe: %v", err)
				}
				if hl.LinkKind != kind || hl.HostNetns == 0 {
					t.Errorf("Describe = %+v: want kind %s and the host netns cookie", hl, kind)
				}
				err := e.inHost(func() error { return MoveToPod(hl, e.pod) })
				if !errors.Is(err, unix.EINVAL) {
					t.Fatalf("MoveToPod(%s) = %v, want EINVAL", kind, err)
				}
				if rec == "without identity" {
					hl = withoutIdentity(hl)
				}
				for i := range 2 {
					if err := e.restore(hl, e.pod.Path()); err != nil {
						t.Fatalf("RestoreToHost #%d: %v", i+1, err)
					}
				}
				wantSame(t, kind, before, snap(t, e.host, "master0"))
			})
		}
	}
}

// TestRestoreAmongLinksSharingMAC returns a netdev that came back from a dead
// pod netns as dev7 while two other host links carry its MAC (as bond
// slaves, VLANs and macvlans do), one of them under its host name's
// neighbour, with and without the identity newer records carry.
func TestRestoreAmongLinksSharingMAC(t *testing.T) {
	testenv.Privileged(t)
	for _, rec := range []string{"described", "without identity"} {
		t.Run(rec, func(t *testing.T) {
			e := newEnv(t)
			e.makeRDMA(t, true)
			e.setMAC(t, rdmaName, sharedMAC)
			before := snap(t, e.host, rdmaName)
			hl, err := e.move(rdmaName, podIf)
			if err != nil {
				t.Fatalf("MoveToPod: %v", err)
			}
			e.refund(t, "dev7")
			for _, other := range []string{"other0", "other1"} {
				addVeth(t, e.host, other, e.peer, "p"+other)
				e.setMAC(t, other, sharedMAC)
			}
			others := []snapshot{snap(t, e.host, "other0"), snap(t, e.host, "other1")}
			if rec == "without identity" {
				hl = withoutIdentity(hl)
			}
			for i := range 2 {
				if err := e.restore(hl, ""); err != nil {
					t.Fatalf("RestoreToHost #%d: %v", i+1, err)
				}
			}
			wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
			wantAbsent(t, e.host, "dev7", "host")
			wantSame(t, "other0", others[0], snap(t, e.host, "other0"))
			wantSame(t, "other1", others[1], snap(t, e.host, "other1"))
		})
	}
}

func TestNetnsLocal(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	h := handle(t, e.host)
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		t.Fatalf("add bridge: %v", err)
	}
	e.makeRDMA(t, true)
	cases := []struct {
		name, want string // want: a word of the reason, "" for movable
		wantErr    bool
	}{
		{name: "br0", want: "bridge"},
		{name: rdmaName},
		{name: "missing0", wantErr: true},
		// The loopback device is netns-local, a kind-less "device": only
		// the kernel's own feature tells, which kernels before 6.12 report.
		{name: "lo", want: map[bool]string{true: "netns-local"}[kernelBefore612(t)]},
	}
	if slices.Contains(masters(), "bond") {
		e.addMaster(t, "bond")
		cases = append(cases, struct {
			name, want string
			wantErr    bool
		}{name: "master0", want: "bond"})
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var why string
			err := e.inHost(func() (err error) { why, err = NetnsLocal(tt.name); return err })
			switch {
			case tt.wantErr && err == nil:
				t.Fatalf("NetnsLocal = %q, want an error", why)
			case !tt.wantErr && err != nil:
				t.Fatalf("NetnsLocal: %v", err)
			case tt.want == "" && why != "", tt.want != "" && !strings.Contains(why, tt.want):
				t.Errorf("NetnsLocal = %q, want %q", why, tt.want)
			}
		})
	}
}

// kernelBefore612 reports whether the running kernel is older than 6.12.
func kernelBefore612(t *testing.T) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	return major < 6 || major == 6 && minor < 12
}
