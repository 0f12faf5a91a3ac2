package soak

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	nic    = "eth0"     // the virtio-net NIC simrdma0 is bound to (exclusive)
	device = "simrdma0" // its RDMA device
	rxe    = "rxe0"     // soft-RoCE (shared)
	parent = "veth0"    // rxe0's netdev
)

// setUp makes the node of the mode, the conflists, the fake kubelet, the
// failpoints of ADD from one traced cycle, and starts STATUS and
// reconcile; the node's reading after that is the base. Any step that
// fails ends the test: no cycle could mean anything.
func (s *soak) setUp(t *testing.T) {
	devs, subnet, ok := s.setUpNode(t)
	if !ok {
		t.Fatal("the node could not be set up: no cycle runs")
	}
	if err := guestkit.InstallPlugin(binDir, fpBuild, guestkit.BinDir); err != nil {
		t.Fatalf("install the failpoint build in %s: %v", binDir, err)
	}
	conflist := s.conflists(t, devs, subnet)
	if !guestkit.Check(t, "kubelet-up", s.kubeletUp) {
		t.FailNow()
	}
	t.Cleanup(func() {
		if s.kubelet != nil {
			s.kubelet.Stop()
		}
	})
	s.discover(t)
	s.status = startStatus(t, s.list)
	s.rec = startReconcile(t, conflist)
	if !guestkit.Check(t, "reconcile-running", s.rec.running) {
		t.FailNow()
	}
	if err := s.settled(); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.base, err = guestkit.ReadNode(stateDirs...); err != nil {
		t.Fatalf("read the node: %v", err)
	}
	t.Logf("soak %s: the node's reading before the cycles: %d facts", s.mode, len(s.base))
}

// setUpNode sets up the node for the soak's mode: for exclusive it
// switches the RDMA netns mode (the guest has no netns yet) and sets up
// eth0, which simrdma0 is bound to, as a node has it; for shared it
// makes rxe0 on veth0 with the node's address in the pods' /64, through
// which soft-RoCE routes their traffic. It returns the plugin's devices
// and the pods' subnet.
func (s *soak) setUpNode(t *testing.T) (devs, subnet string, ok bool) {
	if s.mode == rdma.ModeExclusive {
		ok = guestkit.Check(t, "switch-to-exclusive", func() error {
			if err := netlink.RdmaSystemSetNetnsMode("exclusive"); err != nil {
				return fmt.Errorf("rdma system set netns exclusive: %w", err)
			}
			return modeIs(rdma.ModeExclusive)
		})
		ok = guestkit.Check(t, "simrdma0-on-eth0", func() error { return guestkit.BoundTo(device, nic) }) && ok
		ok = guestkit.Check(t, "nic-setup", func() error { return guestkit.SetUpNIC(nic) }) && ok
		return `["` + device + `"]`, "fd00:96::/64", ok
	}
	ok = guestkit.Check(t, "rxe0-setup", guestkit.SetUpRxe)
	ok = guestkit.Check(t, "node-v6", func() error { return addrOn(parent, "fd00:95::1/64") }) && ok
	return `["` + rxe + `"]`, "fd00:95::/64", ok
}

// settled waits until the node's netdevs have their carrier and no
// tentative address (the kernel adds an address's local route when its DAD
// ends): eth0 after a move back (exclusive), the veth pair rxe0 runs on
// after it was made (shared).
func (s *soak) settled() error {
	if s.mode == rdma.ModeExclusive {
		return guestkit.WaitSettled(nic)
	}
	return errors.Join(guestkit.WaitSettled(parent), guestkit.WaitSettled("veth1"))
}

// addrOn puts cidr on netdev name unless it is there (IPv6 without DAD).
func addrOn(name, cidr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	as, err := guestkit.LinkAddrs(l)
	if err != nil || slices.Contains(as, "addr "+name+" "+cidr) {
		return err
	}
	return netnstest.AddAddrTo(l, cidr)
}

// conflists makes the chain's conflist and the primary's alone (after a
// netns death the primary's own DEL releases its lease; rdma-chain's part
// is reconcile's) and writes the chain's where reconcile reads it. A
// kernel without SMC attaches annotated pods without SMC-R (onUnsupported
// warn; the smc scenario asserts that outcome).
func (s *soak) conflists(t *testing.T, devs, subnet string) string {
	onUnsupported := "fail"
	if !guestkit.HasSMC() {
		onUnsupported = "warn"
	}
	entry := `"mode":"` + string(s.mode) + `","devices":` + devs + `,"podSelection":"requested",` +
		`"podResourcesSocket":"` + kubeletSock + `","resourceNames":["rdma/hca"],"dataDir":"` + dataDir + `",` +
		`"smcr":{"transparent":"off","onUnsupported":"` + onUnsupported + `"},` +
		`"capabilities":{"io.kubernetes.cri.pod-annotations":true},` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"` + subnet + `"}]],"dataDir":"` + rdmaIPAM + `"}`
	var err error
	if s.list, err = guestkit.Conflist("1.1.0", entry); err != nil {
		t.Fatalf("conflist {%s}: %v", entry, err)
	}
	if s.ptp, err = guestkit.Conflist("1.1.0", ""); err != nil {
		t.Fatalf("the primary's conflist: %v", err)
	}
	path, err := guestkit.WriteConflist(confDir, s.list)
	if err != nil {
		t.Fatalf("write the conflist: %v", err)
	}
	t.Logf("soak %s: entry {%s}", s.mode, entry)
	return path
}

// discover runs one traced ADD and DEL of pod "trace" and keeps the
// failpoints the ADD passed, each once, in order. That cycle must leave
// the node as it found it, but for the state and IPAM folders it makes.
func (s *soak) discover(t *testing.T) {
	if err := s.settled(); err != nil {
		t.Fatal(err)
	}
	before, err := guestkit.ReadNode(stateDirs...)
	if err != nil {
		t.Fatalf("read the node: %v", err)
	}
	p := pod("trace")
	if err := guestkit.NewNetNS(p.NetNS); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(traceFile)
	s.c.Trace = traceFile
	guestkit.ExpectOK(t, "traced-add", s.c.Add(s.list, p))
	s.c.Trace = ""
	guestkit.ExpectOK(t, "traced-del", s.c.Del(s.list, p))
	if err := guestkit.DeleteNetNS(p.NetNS); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(traceFile)
	for _, f := range strings.Fields(string(b)) {
		if !slices.Contains(s.addFP, f) {
			s.addFP = append(s.addFP, f)
		}
	}
	if !guestkit.Check(t, "failpoints-found", func() error {
		switch {
		case err != nil:
			return fmt.Errorf("the traced ADD's failpoints: %w", err)
		case len(s.addFP) == 0:
			return errors.New("the traced ADD passed no failpoint")
		}
		return nil
	}) {
		t.FailNow()
	}
	t.Logf("soak %s: %d cycles; ADD failpoints: %s", s.mode, s.cycles, strings.Join(s.addFP, " "))
	guestkit.Check(t, "traced-cycle-left-node", func() error { return s.sameAs(before, false) })
}

// sameAs polls until the node reads as want, since GIDs and IPv6 DAD
// follow a move back asynchronously. It polls for 30 s of the guest's
// time, not a number of readings, as one reading takes a while under TCG. Without files, the state
// and lease files are left out.
func (s *soak) sameAs(want guestkit.Node, files bool) error {
	if !files {
		want = want.WithoutFiles()
	}
	return guestkit.Poll(30*time.Second, 200*time.Millisecond, func() error {
		got, err := guestkit.ReadNode(stateDirs...)
		if err != nil {
			return fmt.Errorf("read the node: %w", err)
		}
		if !files {
			got = got.WithoutFiles()
		}
		if !slices.Equal(got, want) {
			return errors.New("the node differs from before: " + guestkit.Diff(want, got))
		}
		return nil
	})
}

// checkpoint checks that no pod is left and the node equals the base
// (after a leak the next checkpoints compare with what it left), and
// reconcile, idle, has not grown since its baseline.
func (s *soak) checkpoint(t *testing.T, n int) {
	name := fmt.Sprintf("after-%d", n)
	if !guestkit.Check(t, name+"/node-clean", func() error { return s.sameAs(s.base, true) }) {
		s.leaks++
		if err := s.settled(); err != nil {
			t.Logf("soak %s %s: the node's new base read unsettled: %v", s.mode, name, err)
		}
		var err error
		if s.base, err = guestkit.ReadNode(stateDirs...); err != nil {
			t.Fatalf("read the node after a leak: %v", err)
		}
	}
	if !s.baselined {
		s.baseline(t, n)
	}
	s.sample()
	t.Logf("soak %s %s: reconcile idle RSS %d kB (baseline %d, largest seen %d), fds %d (baseline %d, most seen %d)",
		s.mode, name, s.rss, s.rss0, s.rssMax, s.fds, s.fd0, s.fdMax)
	guestkit.Check(t, name+"/reconcile-flat", func() error {
		if err := s.rec.alive(); err != nil {
			return err
		}
		if s.fds > s.fd0+2 || s.rss > s.rss0*3/2+4096 {
			return fmt.Errorf("reconcile grew while idle: RSS %d -> %d kB, fds %d -> %d", s.rss0, s.rss, s.fd0, s.fds)
		}
		return nil
	})
}

// baseline reads reconcile's RSS and fds once it has warmed up (after 20
// cycles, or at the first checkpoint) and is idle, with no record left to
// repair; the checkpoints compare their own idle samples with it.
func (s *soak) baseline(t *testing.T, n int) {
	if err := guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error { return guestkit.RecordCount(dataDir, 0) }); err != nil {
		t.Logf("soak %s: reconcile's baseline taken with records left: %v", s.mode, err)
	}
	s.sample()
	s.rss0, s.fd0, s.baselined = s.rss, s.fds, true
	t.Logf("soak %s: reconcile baseline after %d cycles: RSS %d kB, fds %d", s.mode, n, s.rss0, s.fd0)
}

// sample reads reconcile's RSS and open fds and keeps the largest seen;
// a process gone reads as 0 (reconcile-flat says it exited).
func (s *soak) sample() {
	rss, fds, err := guestkit.ProcUsage(s.rec.pid())
	if err != nil {
		rss, fds = 0, 0
	}
	s.rss, s.fds = rss, fds
	s.rssMax, s.fdMax = max(s.rssMax, rss), max(s.fdMax, fds)
}
