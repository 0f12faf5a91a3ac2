package shared

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// room is how many pods fit once the table is filled: the last of them
// attaches, the next is refused.
const room = 3

// gidRoom fills rxe0's GID table with node addresses on veth0 until room
// pods fit; each of them attaches with a GID for its address, the next
// is refused with 111 before its child is made, leaving nothing; DEL of
// all and the addresses gone return the table to where it started. How
// many rows a node address and a pod's address take is measured here,
// not assumed (rxe: 1 and 2). c's conflist is the last version's.
func gidRoom(t *testing.T, c *guestkit.Calls) {
	if c == nil {
		t.Fatal("no cniVersion part ran")
	}
	f0, size, err := freeGIDs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rxe0 GID table: %d entries, %d free", size, f0)
	var fill filler
	t.Cleanup(func() { _ = fill.free() }) // should a check end the part early
	guestkit.Check(t, "fill-half", func() error { return fill.add(f0 / 2) })
	guestkit.Check(t, "settled-half", settled)
	f1, _, err := freeGIDs()
	if err != nil {
		t.Fatal(err)
	}
	per := (f0 - f1) / (f0 / 2)
	t.Logf("rxe0: %d GID rows free after %d node addresses: %d entries each", f1, f0/2, per)
	guestkit.Check(t, "per-address", func() error {
		if per < 1 {
			return fmt.Errorf("the addresses took %d entries", f0-f1)
		}
		return nil
	})
	pods := []pod{roomPod(t, c, 1)}
	guestkit.Check(t, "settled-room1", settled)
	f2, _, err := freeGIDs()
	if err != nil || per < 1 {
		t.Fatalf("%v (%d rows per node address)", err, per)
	}
	podRows := f1 - f2
	t.Logf("rxe0: a pod's address took %d GID rows", podRows)
	target := (room - 1) * podRows
	guestkit.Check(t, "fill-to-room", func() error {
		if podRows < 1 {
			return fmt.Errorf("a pod's address took %d rows", podRows)
		}
		return errors.Join(fill.add((f2-target)/per), settled())
	})
	guestkit.Check(t, "room-left", func() error {
		f, _, err := freeGIDs()
		t.Logf("rxe0: %d GID rows free after %d node addresses: room for %d more pods", f, fill.n, room-1)
		if err == nil && (f < target || f >= target+2) {
			err = fmt.Errorf("%d free, want %d or %d", f, target, target+1)
		}
		return err
	})
	for n := 2; n <= room; n++ {
		pods = append(pods, roomPod(t, c, n))
	}
	refused(t, c)
	for _, p := range pods {
		guestkit.ExpectOK(t, "del-"+p.Name, c.Gone(t, p))
	}
	guestkit.Check(t, "free", fill.free)
	guestkit.Check(t, "table-as-before", func() error {
		return guestkit.Poll(2*time.Minute, time.Second, func() error {
			f, _, err := freeGIDs()
			if err == nil && f != f0 {
				err = fmt.Errorf("%d free, %d before", f, f0)
			}
			return err
		})
	})
	guestkit.Check(t, "nothing-left", func() error { return errors.Join(c.RecordCount(0), leaseCount(0)) })
	p4 := guestkit.NewPod("ipv6-", "pod4")
	guestkit.ExpectOK(t, "add-with-room", c.AddTo(t, p4))
	guestkit.ExpectOK(t, "del-pod4", c.Gone(t, p4))
}

// refused checks that, with the table full, pod4's ADD fails with 111
// naming rxe0, before its child is made, and leaves no record or lease
// of its own; its DEL succeeds.
func refused(t *testing.T, c *guestkit.Calls) {
	t.Helper()
	p4 := guestkit.NewPod("ipv6-", "pod4")
	guestkit.ExpectCode(t, "add-refused-111", c.Add(t, p4), 111, rxe, "no RoCE GID")
	guestkit.Check(t, "no-child-after-refusal", func() error { return guestkit.NoLink(p4.NetNS, "rdma0") })
	guestkit.Check(t, "nothing-recorded-after-refusal", func() error { return c.RecordCount(room) })
	guestkit.Check(t, "nothing-leased-after-refusal", func() error { return leaseCount(room) })
	guestkit.ExpectOK(t, "del-after-refusal", c.Del(t, p4))
}

// roomPod is the ADD of pod roomN, whose address must become a GID.
func roomPod(t *testing.T, c *guestkit.Calls, n int) pod {
	t.Helper()
	p := guestkit.NewPod("ipv6-", fmt.Sprintf("room%d", n))
	guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p))
	guestkit.Check(t, "gid-"+p.Name, func() error {
		addr, err := guestkit.PodAddr(p.NetNS, "rdma0", podNet)
		if err != nil {
			return err
		}
		return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return guestkit.HasGID(rxe, guestkit.GIDOf(addr), "rdma0") })
	})
	return p
}

// filler adds node addresses (fd00:99::N/128) to veth0 and takes them
// away again.
type filler struct {
	n     int
	added []*netlink.Addr
}

func (f *filler) add(k int) error {
	l, err := netlink.LinkByName(parent)
	if err != nil {
		return err
	}
	for range k {
		f.n++
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(fmt.Sprintf("fd00:99::%x", f.n)), Mask: net.CIDRMask(128, 128)},
			Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, a); err != nil {
			return fmt.Errorf("address %d of %d on %s: %w", f.n, k, parent, err)
		}
		f.added = append(f.added, a)
	}
	return nil
}

func (f *filler) free() error {
	l, err := netlink.LinkByName(parent)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range f.added {
		errs = append(errs, netlink.AddrDel(l, a))
	}
	f.added = nil
	return errors.Join(errs...)
}

// freeGIDs counts rxe0 port 1's free GID rows and its size.
func freeGIDs() (free, size int, err error) {
	return rdma.New().FreeGIDs(rxe, 1, 1<<20)
}

// settled waits, for up to 2 minutes, until the free count has stayed
// the same for 3 s (rxe's GID work queue follows the addresses
// asynchronously).
func settled() error {
	last := -1
	stable := time.Now()
	return guestkit.Poll(2*time.Minute, 500*time.Millisecond, func() error {
		f, _, err := freeGIDs()
		if err != nil {
			return err
		}
		if f != last {
			last, stable = f, time.Now()
		}
		if time.Since(stable) < 3*time.Second {
			return fmt.Errorf("rxe0's free GID rows still changing (%d now)", f)
		}
		return nil
	})
}
