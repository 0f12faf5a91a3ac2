// Package soak is the VM tier's bounded soak, run in its guests:
// TestSoakShared (scenario soak-shared, soft-RoCE rxe0 on veth0, its own
// boot) and TestSoakExclusive (scenario soak-exclusive, the simrdma test
// device on the virtio-net NIC eth0, its own boot). rc.soak=N on the
// kernel command line sets the number of pod cycles (default 50, make
// test's short form; `make soak` runs 2000). The plugin is the failpoint
// build (rdma-chain-fp, in a CNI_PATH of its own), chained after ptp +
// host-local through libcni with each plugin its own process,
// podSelection "requested" against a fake kubelet's pod-resources API,
// IPv6 from host-local on rdma0, every pod annotated for SMC-R. Each cycle
// is one of:
//
//	normal  ADD, DEL                                   (about 3 in 4)
//	death   ADD, the pod's netns deleted without DEL,  (about 1 in 8)
//	        then the primary's own DEL
//	kill    ADD killed (SIGKILL) at a random failpoint, (1 in 8)
//	        then DEL
//
// Meanwhile STATUS runs every 5 s, `rdma-chain-ops reconcile --interval
// 3s` runs (the only repair for a dead netns), and the pod-resources
// socket is down for 8 of every 50 cycles: every ADD then fails with code
// 11 and the runtime's DEL follows, and the first STATUS begun after the
// socket goes (comes back) fails with 50 (passes). Every 100 cycles, and
// at the end, no pod is left and the node must equal its reading from
// before (guestkit.ReadNode: links, addresses, routes, RDMA devices, their
// ports and GIDs, the pnet table, the records, leases and temporary
// files); reconcile's RSS and open fds are sampled and must stay flat.
// The top test's log lines carry the figures: cycles/s, ADD and DEL
// p50/p99, the counts.
//
// Every check is a subtest named as the shell soak's steps were; a call that
// goes wrong in a cycle is a failed check of its own (cycle-N/add, ...)
// and counts against no-failed-calls. The kernel is read through netlink,
// sysfs and pkg/rdma and pkg/smc, never by parsing a tool's text.
package soak

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	binDir    = "/opt/cni-soak"                // the failpoint build's CNI_PATH
	fpBuild   = "/usr/local/bin/rdma-chain-fp" // go build -tags failpoint
	dataDir   = "/run/rdma-chain-soak"
	rdmaIPAM  = "/run/ipam-soak" // rdma0's host-local leases
	ptpIPAM   = "/run/ipam"      // the primary's
	confDir   = "/etc/cni/net.d-soak"
	traceFile = "/tmp/soak-trace.add"
	defCycles = 50
)

var stateDirs = []string{dataDir, rdmaIPAM, ptpIPAM}

// smcCaps is the runtime's capability argument of an SMC-R annotated pod.
var smcCaps = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
	"network.alibabacloud.com/erdma-smcr": "true"}}

func TestSoakShared(t *testing.T) { soakMode(t, rdma.ModeShared) }

func TestSoakExclusive(t *testing.T) { soakMode(t, rdma.ModeExclusive) }

// soak is one guest's run: its calls, the processes beside them, the node
// the checkpoints come back to, and the counts and timings it reports.
type soak struct {
	mode      rdma.Mode
	cycles    int
	c         *guestkit.Chain // the runtime's calls, from the test's goroutine only
	list, ptp *libcni.NetworkConfigList
	kubelet   *fakekubelet.Server // nil while the socket is down
	pods      []fakekubelet.Pod
	status    *statusLoop
	rec       *reconciler
	addFP     []string // the failpoints a traced ADD passed
	base      guestkit.Node

	normal, deaths, kills, refused, failed, leaks int
	addT, delT                                    []time.Duration
	rss0, fd0, rss, fds, rssMax, fdMax            int
	baselined                                     bool
}

func soakMode(t *testing.T, mode rdma.Mode) {
	testenv.VMGuest(t)
	s := &soak{mode: mode, cycles: cycles(t), c: guestkit.NewChain(binDir)}
	s.setUp(t)
	start := time.Now()
	for n := 1; n <= s.cycles; n++ {
		switch n % 50 {
		case 20:
			s.flap(t, n, false)
		case 28:
			s.flap(t, n, true)
		}
		s.cycle(t, n)
		if n%10 == 0 {
			s.sample()
		}
		if n == 20 {
			s.baseline(t, n)
		}
		if n%100 == 0 || n == s.cycles {
			if s.kubelet == nil {
				s.flap(t, n, true)
			}
			s.checkpoint(t, n)
		}
	}
	secs := time.Since(start).Seconds()
	s.status.halt()
	s.rec.halt()
	s.report(t, secs)
	s.finalChecks(t)
}

// cycles is rc.soak=N of the kernel command line, else defCycles.
func cycles(t *testing.T) int {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatalf("the kernel command line: %v", err)
	}
	m := regexp.MustCompile(`(?:^|\s)rc\.soak=(\S*)`).FindSubmatch(b)
	if m == nil {
		return defCycles
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil || n < 1 {
		t.Fatalf("rc.soak=%s: want a number of cycles, at least 1", m[1])
	}
	return n
}

// report logs the soak's figures (the scenario's RC-INFO lines).
func (s *soak) report(t *testing.T, secs float64) {
	stOK, stFail, _ := s.status.counts()
	t.Logf("soak %s: %d cycles in %.0f s (%.2f cycles/s): %d normal, %d netns deaths, %d SIGKILLs, "+
		"%d refused while kubelet was down, %d failed calls, %d leaks; ADD p50 %s ms p99 %s ms, DEL p50 %s ms p99 %s ms; "+
		"STATUS %d ok, %d failed; reconcile RSS %d -> %d kB (largest %d), fds %d -> %d (most %d)",
		s.mode, s.cycles, secs, float64(s.cycles)/max(secs, 1), s.normal, s.deaths, s.kills, s.refused, s.failed, s.leaks,
		pct(s.addT, 50), pct(s.addT, 99), pct(s.delT, 50), pct(s.delT, 99),
		stOK, stFail, s.rss0, s.rss, s.rssMax, s.fd0, s.fds, s.fdMax)
}

// pct is the p-th percentile of ds in ms, "-" when there is none.
func pct(ds []time.Duration, p int) string {
	d, ok := guestkit.Percentile(ds, p)
	if !ok {
		return "-"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// finalChecks checks that nothing leaked, no call went wrong, every
// kind of cycle ran, STATUS followed the socket, and exclusive mode is
// still on.
func (s *soak) finalChecks(t *testing.T) {
	guestkit.Check(t, "no-leaks", func() error { return zero("checkpoints found the node changed", s.leaks) })
	guestkit.Check(t, "no-failed-calls", func() error { return zero("calls went wrong", s.failed) })
	guestkit.Check(t, "every-kind-ran", func() error {
		if s.deaths == 0 || s.kills == 0 || s.refused == 0 || s.normal == 0 {
			return fmt.Errorf("%d normal, %d netns deaths, %d SIGKILLs, %d refused: each kind must run", s.normal, s.deaths, s.kills, s.refused)
		}
		return nil
	})
	// STATUS fails while the pod-resources socket is down and recovers.
	guestkit.Check(t, "status-followed-kubelet", func() error {
		ok, failed, last := s.status.counts()
		if last.err != nil {
			return fmt.Errorf("STATUS %d ok, %d failed; the last failed: %w", ok, failed, last.err)
		}
		if ok == 0 || failed == 0 {
			return fmt.Errorf("STATUS %d ok, %d failed: want both", ok, failed)
		}
		return nil
	})
	if s.mode == rdma.ModeExclusive {
		guestkit.Check(t, "mode-still-exclusive", func() error { return modeIs(rdma.ModeExclusive) })
	}
}

func zero(what string, n int) error {
	if n != 0 {
		return fmt.Errorf("%d %s", n, what)
	}
	return nil
}

func modeIs(want rdma.Mode) error {
	mode, err := rdma.New().NetnsMode()
	if err != nil {
		return fmt.Errorf("RDMA netns mode: %w", err)
	}
	if mode != want {
		return fmt.Errorf("RDMA netns mode %q, want %s", mode, want)
	}
	return nil
}
