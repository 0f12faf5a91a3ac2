package crash

import (
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

// addKilled checks that ADD killed at fp leaves something rdma-chain owns
// (and, read before anyone cleans up, a node that differs from the base),
// then mode (DEL or GC) gives the node back.
func (m *matrix) addKilled(t *testing.T, fp, mode string) {
	p, n := m.newPod(t)
	defer netnstest.Delete(n)
	list := m.list(mode)
	before := m.owned(t, p)
	m.c.Failpoint = fp
	err := m.c.Add(list, p.kit())
	m.c.Failpoint = ""
	m.checkKilled(t, fp, err)
	left := m.owned(t, p)
	if slices.Equal(before, left) {
		t.Errorf("ADD killed at %s changed nothing rdma-chain owns", fp)
	}
	t.Logf("left: %s", guestkit.Diff(before, left))
	if mode == "DEL" {
		now, err := guestkit.ReadNode(stateDirs...)
		switch {
		case err != nil:
			t.Errorf("read the node after the crash: %v", err)
		case slices.Equal(now, m.base):
			t.Errorf("the node reads as the base right after the crash: the comparison would see no leak")
		}
	}
	m.undo(t, p, mode)
}

// delKilled checks that ADD, then DEL killed at fp, then mode (DEL
// again or GC) gives the node back.
func (m *matrix) delKilled(t *testing.T, fp, mode string) {
	p, n := m.newPod(t)
	defer netnstest.Delete(n)
	list := m.list(mode)
	if err := m.c.Add(list, p.kit()); err != nil {
		t.Errorf("ADD: %v", err)
	}
	m.c.Failpoint = fp
	err := m.c.Del(list, p.kit())
	m.c.Failpoint = ""
	m.checkKilled(t, fp, err)
	m.undo(t, p, mode)
}

// list is the conflist a case of mode attaches with: GC needs 1.1.0.
func (m *matrix) list(mode string) *libcni.NetworkConfigList {
	if mode == "GC" {
		return m.gc
	}
	return m.del
}

// checkKilled checks that the call failed because the plugin died of
// SIGKILL at fp. A case goes on after a failed check: what follows gives
// the node back.
func (m *matrix) checkKilled(t *testing.T, fp string, err error) {
	t.Helper()
	if err == nil || !m.c.Killed || !strings.Contains(err.Error(), "failpoint "+fp+": SIGKILL") {
		t.Errorf("not killed at %s (SIGKILL %v): %v", fp, m.c.Killed, err)
	}
}

// undo is what follows a crash: the runtime's DEL (1.0.0), or a GC (1.1.0)
// and the primary's own DEL. Then the node must equal the base; after a
// leak the next run starts from what this one left.
func (m *matrix) undo(t *testing.T, p pod, mode string) {
	t.Helper()
	if mode == "DEL" {
		if err := m.c.Del(m.del, p.kit()); err != nil {
			t.Errorf("DEL: %v", err)
		}
	} else {
		if err := m.c.GC(m.gc); err != nil {
			t.Errorf("GC: %v", err)
		}
		if err := m.c.Del(m.ptp, p.kit()); err != nil {
			t.Errorf("the primary's DEL: %v", err)
		}
	}
	m.runs++
	if got, ok := guestkit.SettleTo(t, m.base, stateDirs...); !ok {
		m.leaked = append(m.leaked, t.Name())
		t.Errorf("the node differs from before: %s", guestkit.Diff(m.base, got))
		guestkit.Settled(t, m.nic)
		var err error
		if m.base, err = guestkit.ReadNode(stateDirs...); err != nil {
			t.Fatalf("read the node after a leak: %v", err)
		}
	}
}

func (m *matrix) owned(t *testing.T, p pod) guestkit.Node {
	t.Helper()
	o, err := guestkit.Owned(m.nic, p.netns, dataDir, rdmaIPAM)
	if err != nil {
		t.Errorf("what rdma-chain owns: %v", err)
	}
	return o
}
