package upgrade

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

// checkedByTo attaches p with from, checks and deletes it with to, and
// checks that the node equals its reading from before the ADD.
func (m *matrix) checkedByTo(t *testing.T, from, to string, p guestkit.Pod) {
	base := m.settledNode(t)
	guestkit.Check(t, "use-from", func() error { return use(from) })
	m.c.List = m.v10
	guestkit.ExpectOK(t, "add", m.c.Add(t, p))
	guestkit.Check(t, "attached", func() error { return m.attached(p) })
	// the comparison would see a pod left behind
	guestkit.Check(t, "snapshot-sees-the-pod", func() error {
		now, err := m.read()
		if err == nil && slices.Equal(now, base) {
			err = errors.New("the node reading with the pod attached equals the one before")
		}
		return err
	})
	guestkit.Check(t, "use-to", func() error { return use(to) })
	guestkit.ExpectOK(t, "check", m.c.CheckOwn(t, p))
	guestkit.ExpectOK(t, "del", m.c.Gone(t, p))
	m.restored(t, "node-restored", base)
}

// collectedByTo attaches p with from, kills its netns without DEL, and
// checks that to's GC (1.1.0) and ptp's DEL clean up, so that the node
// equals its reading again.
func (m *matrix) collectedByTo(t *testing.T, from, to string, p guestkit.Pod) {
	base := m.settledNode(t)
	guestkit.Check(t, "use-from-gc-case", func() error { return use(from) })
	m.c.List = m.v10
	guestkit.ExpectOK(t, "gc-case-add", m.c.Add(t, p))
	guestkit.Check(t, "gc-case-attached", func() error { return m.attached(p) })
	guestkit.DelNetNS(t, p)
	guestkit.Check(t, "use-to-gc-case", func() error { return use(to) })
	guestkit.ExpectOK(t, "gc", m.c.Logged(t, "GC", p, m.c.C.GC(m.v11)))
	m.c.List = m.ptp
	guestkit.ExpectOK(t, "ptp-del", m.c.Del(t, p))
	m.restored(t, "gc-restored", base)
}

func (m *matrix) read() (guestkit.Node, error) { return guestkit.ReadNode(dataDir, ripam, "/run/ipam") }

// settledNode reads the node once it has settled.
func (m *matrix) settledNode(t *testing.T) guestkit.Node {
	t.Helper()
	if err := m.mode.Settle(); err != nil {
		t.Fatal(err)
	}
	n, err := m.read()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// restored waits until the node comes back to base; it polls, since GIDs
// and DAD follow a move back asynchronously.
func (m *matrix) restored(t *testing.T, name string, base guestkit.Node) {
	t.Helper()
	guestkit.Check(t, name, func() error {
		if err := m.mode.Settle(); err != nil {
			return err
		}
		return guestkit.Poll(30*time.Second, 200*time.Millisecond, func() error {
			got, err := m.read()
			if err == nil && !slices.Equal(got, base) {
				err = fmt.Errorf("node differs from before: %s", guestkit.Diff(base, got))
			}
			return err
		})
	})
}

// attached checks that the pod has rdma0 with an address of the subnet,
// and its SMC pnet entry of its eth0 (no SMC pnet table at all on a
// kernel without SMC).
func (m *matrix) attached(p guestkit.Pod) error {
	if _, err := guestkit.PodAddr(p.NetNS, "rdma0", m.subnet); err != nil {
		return err
	}
	rows, err := guestkit.Pnet(p.NetNS)
	if err != nil {
		return err
	}
	if !guestkit.HasSMC() {
		return nil
	}
	for _, r := range rows {
		if strings.HasSuffix(r, " eth eth0") {
			return nil
		}
	}
	return fmt.Errorf("%s's pnet table lacks its eth0: %q", p.Name, rows)
}
