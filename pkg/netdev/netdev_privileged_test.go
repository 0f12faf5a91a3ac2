package netdev

import (
	"errors"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

func TestMoveToPodAndRestore(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name string
		up   bool
	}{{"was up", true}, {"was down", false}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			before := e.makeRDMA(t, tt.up)
			hl, err := e.move(rdmaName, podIf)
			if err != nil {
				t.Fatalf("MoveToPod: %v", err)
			}
			if hl.HostName != rdmaName || hl.PodName != podIf || hl.MTU != rdmaMTU || hl.WasUp != tt.up ||
				hl.MAC != before.MAC || len(hl.HostAddrs) != 2 {
				t.Errorf("state.HostLink = %+v", hl)
			}
			inPod := snap(t, e.pod, podIf)
			if !inPod.Exists || !inPod.Up || inPod.MAC != before.MAC || inPod.Alias != rdmaName || inPod.MTU != rdmaMTU {
				t.Errorf("in pod: %+v", inPod)
			}
			wantAbsent(t, e.host, rdmaName, "host")
			for i := range 2 { // the second restore must be a no-op
				if err := e.restore(hl, e.pod.Path()); err != nil {
					t.Fatalf("RestoreToHost #%d: %v", i+1, err)
				}
				wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
				wantAbsent(t, e.pod, podIf, "pod")
			}
		})
	}
}

func TestMoveToPodNameExistsInPod(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	before := e.makeRDMA(t, true)
	addVeth(t, e.pod, podIf, e.peer, "peer1")
	podBefore := snap(t, e.pod, podIf)
	hl, err := e.move(rdmaName, podIf)
	if err == nil {
		t.Fatal("MoveToPod succeeded although the pod has net1")
	}
	wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
	// ADD's undo runs after every failed move: it must leave both alone.
	if err := e.restore(hl, e.pod.Path()); err != nil {
		t.Fatalf("RestoreToHost: %v", err)
	}
	wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
	wantSame(t, "pod's own net1", podBefore, snap(t, e.pod, podIf))
}

func TestMoveToPodNameClashOnHost(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	before := e.makeRDMA(t, true)
	addVeth(t, e.host, podIf, e.peer, "peer1")
	clash := snap(t, e.host, podIf)
	hl, err := e.move(rdmaName, podIf)
	if err != nil {
		t.Fatalf("MoveToPod: %v", err)
	}
	if s := snap(t, e.pod, podIf); s.MAC != before.MAC || !s.Up {
		t.Errorf("in pod: %+v", s)
	}
	wantSame(t, "host's own net1", clash, snap(t, e.host, podIf))
	if err := e.restore(hl, e.pod.Path()); err != nil {
		t.Fatalf("RestoreToHost: %v", err)
	}
	wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
	wantSame(t, "host's own net1", clash, snap(t, e.host, podIf))
}

// TestRestoreAfterKernelRefund simulates the kernel returning a physical
// netdev to the host (renamed dev7, addresses gone) when the pod netns dies.
func TestRestoreAfterKernelRefund(t *testing.T) {
	testenv.Privileged(t)
	for _, tt := range []struct {
		name      string
		deletePod bool
	}{{"empty pod path", false}, {"pod netns deleted", true}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			before := e.makeRDMA(t, true)
			hl, err := e.move(rdmaName, podIf)
			if err != nil {
				t.Fatalf("MoveToPod: %v", err)
			}
			e.refund(t, "dev7")
			podPath := ""
			if tt.deletePod {
				podPath = e.pod.Path()
				netnstest.Delete(e.pod)
			}
			for i := range 2 {
				if err := e.restore(hl, podPath); err != nil {
					t.Fatalf("RestoreToHost #%d: %v", i+1, err)
				}
				wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
				wantAbsent(t, e.host, "dev7", "host")
			}
		})
	}
}

// refund moves the pod's net1 to the host and renames it name there.
func (e *env) refund(t *testing.T, name string) {
	t.Helper()
	ph, hh := handle(t, e.pod), handle(t, e.host)
	pl, err := ph.LinkByName(podIf)
	if err == nil {
		err = ph.LinkSetNsFd(pl, int(e.host.Fd()))
	}
	if err != nil {
		t.Fatalf("refund: %v", err)
	}
	hl, err := hh.LinkByName(podIf)
	if err == nil {
		err = hh.LinkSetName(hl, name)
	}
	if err != nil {
		t.Fatalf("refund rename: %v", err)
	}
}

func TestRestoreGoneWithPodNetns(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	e.makeRDMA(t, true)
	hl, err := e.move(rdmaName, podIf)
	if err != nil {
		t.Fatalf("MoveToPod: %v", err)
	}
	podPath := e.pod.Path()
	netnstest.Delete(e.pod) // the veth dies with it
	for i := range 2 {
		if err := e.restore(hl, podPath); !errors.Is(err, ErrGone) {
			t.Fatalf("RestoreToHost #%d = %v, want ErrGone", i+1, err)
		}
	}
	wantAbsent(t, e.host, rdmaName, "host")
}

// TestMoveToPodUndo checks that a move the kernel refuses, with names
// pkg/config would have refused (MoveToPod leaves name rules to it), and
// its undo as ADD registers it (RestoreToHost) leave the host as found: a
// name too long is refused before anything moves, one with a ':' only at
// the rename, after the netdev crossed into the pod under its host name.
func TestMoveToPodUndo(t *testing.T) {
	testenv.Privileged(t)
	for _, name := range []string{"averyverylongname", "bad:name"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			before := e.makeRDMA(t, true)
			hl, err := e.move(rdmaName, name)
			if err == nil {
				t.Fatalf("MoveToPod(%q) succeeded", name)
			}
			for i := range 2 {
				if err := e.restore(hl, e.pod.Path()); err != nil {
					t.Fatalf("RestoreToHost #%d: %v", i+1, err)
				}
				wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
				wantAbsent(t, e.pod, name, "pod")
				wantAbsent(t, e.pod, rdmaName, "pod")
			}
		})
	}
}

// TestRestoreNameTakenOnHost checks that a restore which cannot take the host
// name back leaves the netdev in the pod, intact, and that a retry once
// the name is free converges.
func TestRestoreNameTakenOnHost(t *testing.T) {
	testenv.Privileged(t)
	e := newEnv(t)
	before := e.makeRDMA(t, true)
	hl, err := e.move(rdmaName, podIf)
	if err != nil {
		t.Fatalf("MoveToPod: %v", err)
	}
	inPod := snap(t, e.pod, podIf)
	clash := addVeth(t, e.host, rdmaName, e.peer, "peer1") // someone took the name
	if err := e.restore(hl, e.pod.Path()); err == nil {
		t.Fatal("RestoreToHost succeeded although the host name is taken")
	}
	wantSame(t, "pod netdev", inPod, snap(t, e.pod, podIf))
	if l, _ := handle(t, e.host).LinkByName(rdmaName); l == nil || l.Attrs().Index != clash.Attrs().Index {
		t.Error("the other host rdma0 was disturbed")
	}
	if err := handle(t, e.host).LinkDel(clash); err != nil {
		t.Fatal(err)
	}
	if err := e.restore(hl, e.pod.Path()); err != nil {
		t.Fatalf("RestoreToHost retry: %v", err)
	}
	wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
}

// TestMoveToPodRefusesChangedNetdev checks that MoveToPod moves only
// the netdev that was described: one whose MAC or index differs is
// refused before anything changes.
func TestMoveToPodRefusesChangedNetdev(t *testing.T) {
	testenv.Privileged(t)
	for _, change := range []string{"mac", "index"} {
		t.Run(change, func(t *testing.T) {
			e := newEnv(t)
			before := e.makeRDMA(t, true)
			var hl state.HostLink
			if err := e.inHost(func() (err error) { hl, err = Describe(rdmaName, podIf); return err }); err != nil {
				t.Fatalf("Describe: %v", err)
			}
			if change == "mac" {
				hl.MAC = "02:00:00:00:00:99"
			} else {
				hl.HostIndex++
			}
			if err := e.inHost(func() error { return MoveToPod(hl, e.pod) }); err == nil {
				t.Fatal("MoveToPod moved a netdev that changed since it was described")
			}
			wantSame(t, "host netdev", before, snap(t, e.host, rdmaName))
			wantAbsent(t, e.pod, podIf, "pod")
		})
	}
}
