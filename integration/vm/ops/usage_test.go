package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
)

const (
	usageNetDir  = "/etc/cni/net.d-usage"
	usageConf    = usageNetDir + "/usagenet.conflist"
	usageDataDir = "/run/rdma-chain-usage"
	usageLog     = "/run/reconcile-usage.log"
	usageMetrics = "http://127.0.0.1:9743/metrics"
)

// usageConflist is shared mode on rxe0, each pod an ipvlan child with
// IPv6 from host-local; the pods' eth0 (ptp) carries perftest's own
// exchange.
const usageConflist = `{"cniVersion":"1.0.0","name":"usagenet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.97.0.0/24"}]],"dataDir":"/run/ipam-usage"}},
 {"type":"rdma-chain","mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"` + usageDataDir + `",
  "sharedLink":{"type":"ipvlan"},
  "ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:79::/64"}]],"dataDir":"/run/ipam-usage-rdma"}}
]}
`

// usagePod is one of TestOpsUsage's pods.
type usagePod struct {
	guestkit.Pod
	v6, v4 string
}

// TestOpsUsage (scenario ops-usage, in ops's boot): per-pod RDMA usage.
// Two shared-mode pods on rxe0; `reconcile --metrics-pod-labels` serves
// the metrics. While an rping runs between the pods (server in the
// first, client in the second) and then perftest's ib_send_bw, the
// scrape shows each pod's QPs, CQs, MRs, PDs and MR bytes on rxe0 and
// inspect --json the same with the processes' pids; after the pods' DEL
// no series names them. Measured on the way: the RES dumps give the
// owners' pids as the host pid namespace numbers them, and a reader in a
// new pid namespace sees none of the pods' objects (why the DaemonSet
// has hostPID).
func TestOpsUsage(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("rxe0 could not be set up: no case runs")
	}
	c := guestkit.NewCalls(t, "1.0.0", usageDataDir)
	if !writeConflist(t, c, usageConf, []byte(usageConflist)) {
		t.Fatal("no conflist: no case runs")
	}
	// soft-RoCE routes the pods' RoCE v2 traffic through init_net: a node
	// address in their subnet gives it the route (docs/kernels.md)
	guestkit.Check(t, "node-v6", func() error { return guestkit.AddrOnce("veth0", "fd00:79::1/64") })
	a := &usagePod{Pod: guestkit.NewPod("usage-", "usage-a")}
	b := &usagePod{Pod: guestkit.NewPod("usage-", "usage-b")}
	if !guestkit.Check(t, "cgroups", func() error { return setUpCgroups(t, a, b) }) {
		t.Fatal("no cgroups: no case runs")
	}
	for _, p := range []*usagePod{a, b} {
		guestkit.ExpectOK(t, "add-"+p.Name, c.Add(t, p.Pod))
		p.v6 = podV6(t, p.Pod, "fd00:79:")
		p.v4, _ = guestkit.PodAddr(p.NetNS, "eth0", "10.97.")
	}
	d, err := guestkit.StartCommand(t, usageLog, nil, readerVia[0], append(readerVia[1:], guestkit.OpsBinary,
		"reconcile", "--conflist", usageConf, "--cni-bin-dir", cniBinDir,
		"--interval", "10m", "--metrics-bind-address", "127.0.0.1:9743", "--metrics-pod-labels")...)
	if err != nil {
		t.Fatal(err)
	}
	reader := d.Pid()
	guestkit.Check(t, "idle-pods-zero", func() error {
		return pollScrape(func(s guestkit.Scrape) error {
			return errors.Join(podObjects(s, a, "qp", 0, 0), podObjects(s, b, "qp", 0, 0))
		})
	})
	guestkit.Check(t, "rping-usage", func() error {
		return withRping(t, a, b, func(srv, cli int) error { return runningUsage(t, reader, a, b, srv, cli) })
	})
	guestkit.Check(t, "perftest-usage", func() error {
		// ib_send_bw over soft-RoCE under TCG sometimes ends its run with
		// "Completion with error" (6.12, a loaded host): that run is logged
		// and one more is made
		var err error
		for try := 1; try <= 2; try++ {
			err = withPerftest(t, a, b, func(srv, cli int) error { return runningUsage(t, reader, a, b, srv, cli) })
			if err == nil || !strings.Contains(err.Error(), "Completion with error") {
				return err
			}
			t.Logf("ib_send_bw, try %d: %v", try, err)
		}
		return err
	})
	guestkit.Check(t, "idle-again", func() error {
		return pollScrape(func(s guestkit.Scrape) error {
			return errors.Join(podObjects(s, a, "qp", 0, 0), podObjects(s, b, "mr", 0, 0))
		})
	})
	for _, p := range []*usagePod{a, b} {
		guestkit.ExpectOK(t, "del-"+p.Name, c.Gone(t, p.Pod))
	}
	guestkit.Check(t, "no-series-after-del", func() error {
		return pollScrape(func(s guestkit.Scrape) error {
			for _, p := range []*usagePod{a, b} {
				if got := s.Find("rdma_chain_pod_rdma_objects", map[string]string{"pod": p.Name}); len(got) > 0 {
					return fmt.Errorf("%s's series after its DEL: %v", p.Name, got)
				}
			}
			return nil
		})
	})
	guestkit.Check(t, "reconcile-stops", func() error { return d.Stop(10 * time.Second) })
	t.Logf("ops-usage: %.0f s", time.Since(start).Seconds())
}

// runningUsage checks that while the server (pid srv, in a) and the
// client (pid cli, in b) run, each pod has at least one QP, CQ, MR and PD
// on rxe0 and MR bytes in the scrape of reconcile (pid reader), and
// inspect --json names its process, both with the reconcile container's
// privileges alone (privileges); the RES dump read here (the host pid
// namespace) names both pids, one from a new pid namespace neither.
func runningUsage(t *testing.T, reader int, a, b *usagePod, srv, cli int) error {
	return errors.Join(privileges(t, reader, []*usagePod{a, b}, srv, cli), scrapedUsage(a, b),
		inspectedUsage(t, a, b, srv, cli), pidNamespaces(t, srv, cli))
}

// scrapedUsage checks that each pod has at least one QP, CQ, MR and PD
// on rxe0 and MR bytes in the scrape.
func scrapedUsage(a, b *usagePod) error {
	return pollScrape(func(s guestkit.Scrape) error {
		var errs []error
		for _, p := range []*usagePod{a, b} {
			for _, k := range []string{"qp", "cq", "mr", "pd"} {
				errs = append(errs, podObjects(s, p, k, 1, 1<<20))
			}
			errs = append(errs, podMRBytes(s, p))
		}
		return errors.Join(errs...)
	})
}

// inspectedUsage checks that inspect --json, run as the reconcile
// container, gives each pod a QP, an MR and MR bytes on rxe0 with its
// process's pid.
func inspectedUsage(t *testing.T, a, b *usagePod, srv, cli int) error {
	in := inspectVia(t, "inspect-usage", readerVia, nil, "--data-dir", usageDataDir)
	if in.err != nil {
		return in.err
	}
	var errs []error
	for _, w := range []struct {
		p   *usagePod
		pid int
	}{{a, srv}, {b, cli}} {
		at, err := in.attachment("default/" + w.p.Name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(at.Usage, func(u deviceUsage) bool { return u.Device == "rxe0" })
		if i < 0 || at.Usage[i].QP < 1 || at.Usage[i].MR < 1 || at.Usage[i].MRBytes == 0 || !slices.Contains(at.Usage[i].PIDs, w.pid) {
			errs = append(errs, fmt.Errorf("%s's rdmaUsage %+v; want rxe0 with a QP, an MR, MR bytes and pid %d", w.p.Name, at.Usage, w.pid))
		}
	}
	return errors.Join(errs...)
}

// pidNamespaces checks that the kernel's RES dump, read in this (the
// host's) pid namespace, gives QPs owned by srv and cli; `rdma resource
// show qp` run in a new pid namespace lists the same QPs, none with a
// pid (the kernel names an owner only to a reader whose pid namespace
// holds it).
func pidNamespaces(t *testing.T, srv, cli int) error {
	es, err := rdmares.Dump("")
	if err != nil {
		return err
	}
	owners := map[int]int{}
	qps := 0
	for _, e := range es {
		if e.Kind == rdmares.QP {
			owners[int(e.PID)]++
			qps++
		}
	}
	if owners[srv] == 0 || owners[cli] == 0 {
		return fmt.Errorf("QP owners %v in the host pid namespace lack the server %d or client %d", owners, srv, cli)
	}
	cmd := exec.Command("/usr/sbin/rdma", "-j", "resource", "show", "qp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("rdma resource show qp in a new pid namespace: %w", err)
	}
	var seen []map[string]any
	if err := json.Unmarshal(out, &seen); err != nil {
		return fmt.Errorf("rdma resource show qp in a new pid namespace: %w: %s", err, out)
	}
	t.Logf("QP owners in the host pid namespace %v; a new pid namespace sees %d QPs: %s", owners, len(seen), bytes.TrimSpace(out))
	withPID := slices.IndexFunc(seen, func(q map[string]any) bool { _, ok := q["pid"]; return ok })
	if len(seen) != qps || withPID >= 0 {
		return fmt.Errorf("a new pid namespace sees %d QPs (the host's %d), one with a pid: %v", len(seen), qps, withPID >= 0)
	}
	return nil
}

type deviceUsage struct {
	Device  string `json:"device"`
	QP      int    `json:"qp"`
	CQ      int    `json:"cq"`
	MR      int    `json:"mr"`
	PD      int    `json:"pd"`
	MRBytes uint64 `json:"mrBytes"`
	PIDs    []int  `json:"pids"`
}

// pollScrape polls the metrics for 30 s until check holds.
func pollScrape(check func(guestkit.Scrape) error) error {
	return guestkit.Poll(30*time.Second, 500*time.Millisecond, func() error {
		s, err := guestkit.ScrapeMetrics(usageMetrics)
		if err != nil {
			return err
		}
		return check(s)
	})
}

// podObjects checks that p's rdma_chain_pod_rdma_objects of kind on
// rxe0 is within [lo, hi].
func podObjects(s guestkit.Scrape, p *usagePod, kind string, lo, hi float64) error {
	got := s.Find("rdma_chain_pod_rdma_objects", map[string]string{"namespace": "default", "pod": p.Name, "device": "rxe0", "type": kind})
	if len(got) != 1 || got[0].Value < lo || got[0].Value > hi {
		return fmt.Errorf("%s's %s on rxe0: %v, want one sample in [%g, %g]", p.Name, kind, got, lo, hi)
	}
	return nil
}

func podMRBytes(s guestkit.Scrape, p *usagePod) error {
	got := s.Find("rdma_chain_pod_rdma_mr_bytes", map[string]string{"namespace": "default", "pod": p.Name, "device": "rxe0"})
	if len(got) != 1 || got[0].Value <= 0 {
		return fmt.Errorf("%s's MR bytes on rxe0: %v, want one sample above 0", p.Name, got)
	}
	return nil
}

// withRping runs an endless rping between the pods (server in a on a's
// IPv6 address, client in b) while f runs, with their pids.
func withRping(t *testing.T, a, b *usagePod, f func(srv, cli int) error) error {
	if a.v6 == "" {
		return errors.New("usage-a has no address on rdma0")
	}
	return withPair(t, "rping", []string{"rping", "-s", "-a", a.v6}, []string{"rping", "-c", "-a", a.v6},
		func() error {
			return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return cmListening(a.v6) })
		}, a, b, f)
}

// withPerftest runs ib_send_bw for 60 s between the pods' RoCE v2 GIDs of
// their rdma0 addresses (perftest's own exchange over the pods' eth0)
// while f runs.
func withPerftest(t *testing.T, a, b *usagePod, f func(srv, cli int) error) error {
	ga, errA := roceV2Index(a.v6)
	gb, errB := roceV2Index(b.v6)
	if err := errors.Join(errA, errB); err != nil || a.v4 == "" {
		return fmt.Errorf("perftest ends: %w (usage-a eth0 %q)", err, a.v4)
	}
	args := func(gid int) []string {
		return []string{"ib_send_bw", "-d", "rxe0", "-x", strconv.Itoa(gid), "-F", "-D", "60", "-p", "18515"}
	}
	return withPair(t, "ib_send_bw", args(ga), append(args(gb), a.v4),
		func() error {
			return guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error { return tcpListen(a, 18515) })
		}, a, b, f)
}

// withPair starts srvArgs in a, waits for ready, starts cliArgs in b
// until both hold a QP (a client that exited without, as rping after an
// address resolution that timed out under TCG, is started again, 3 tries),
// runs f with their pids, and kills both.
func withPair(t *testing.T, name string, srvArgs, cliArgs []string, ready func() error, a, b *usagePod, f func(srv, cli int) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var srvOut guestkit.LockedBuffer
	srv, started, err := podCommand(ctx, a, srvArgs)
	if err != nil {
		return err
	}
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	err = srv.Start()
	started()
	if err != nil {
		return fmt.Errorf("%s server: %w", name, err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	if err := ready(); err != nil {
		return fmt.Errorf("%s server in %s: %w: %s", name, a.Name, err, srvOut.String())
	}
	var cli *exec.Cmd
	var cliOut guestkit.LockedBuffer
	for try := 1; try <= 3; try++ {
		var started func()
		if cli, started, err = podCommand(ctx, b, cliArgs); err != nil {
			return err
		}
		cli.Stdout, cli.Stderr = &cliOut, &cliOut
		err = cli.Start()
		started()
		if err != nil {
			return fmt.Errorf("%s client: %w", name, err)
		}
		exited := make(chan struct{})
		go func() { _ = cli.Wait(); close(exited) }()
		defer func() { _ = cli.Process.Kill(); <-exited }()
		err = connected(exited, srv.Process.Pid, cli.Process.Pid)
		if err == nil {
			break
		}
		t.Logf("%s %s -> %s, try %d: %v", name, b.Name, a.Name, try, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w; server: %s", name, err, srvOut.String())
	}
	t.Logf("%s: server pid %d in %s, client pid %d in %s", name, srv.Process.Pid, a.Name, cli.Process.Pid, b.Name)
	if err := f(srv.Process.Pid, cli.Process.Pid); err != nil {
		return fmt.Errorf("%w; %s server: %s; client: %s", err, name, srvOut.String(), cliOut.String())
	}
	return nil
}

// connected polls for 20 s until both pids hold a QP, and stops when the
// client has exited.
func connected(exited <-chan struct{}, srv, cli int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := holdQPs(srv, cli)
		select {
		case <-exited:
			return fmt.Errorf("the client exited: %w", err)
		default:
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// holdQPs checks that the kernel's RES dump has a QP of each pid.
func holdQPs(pids ...int) error {
	es, err := rdmares.Dump("")
	if err != nil {
		return err
	}
	for _, p := range pids {
		if !slices.ContainsFunc(es, func(e rdmares.Entry) bool { return e.Kind == rdmares.QP && int(e.PID) == p }) {
			return fmt.Errorf("process %d holds no QP", p)
		}
	}
	return nil
}

// cmListening checks that an rdma_cm id listens on addr (rdma resource
// show cm_id).
func cmListening(addr string) error {
	out, err := exec.Command("/usr/sbin/rdma", "-j", "resource", "show", "cm_id").Output()
	if err != nil {
		return err
	}
	if !bytes.Contains(out, []byte(`"state":"LISTEN"`)) || !bytes.Contains(out, []byte(addr)) {
		return fmt.Errorf("no cm_id listens on %s: %s", addr, out)
	}
	return nil
}

// tcpListen checks that a TCP socket listens on port in p's netns.
func tcpListen(p *usagePod, port int) error {
	out, err := exec.Command("/usr/sbin/ip", "netns", "exec", p.Name, "cat", "/proc/net/tcp").Output()
	if err != nil {
		return err
	}
	if !bytes.Contains(out, fmt.Appendf(nil, ":%04X 00000000:0000 0A", port)) {
		return fmt.Errorf("nothing listens on TCP port %d in %s", port, p.Name)
	}
	return nil
}

// roceV2Index is the index of rxe0's RoCE v2 GID of addr.
func roceV2Index(addr string) (int, error) {
	gs, err := guestkit.DevGIDs("rxe0")
	if err != nil {
		return 0, err
	}
	want := guestkit.GIDOf(addr)
	for _, g := range gs {
		if g.GID == want && g.Type == "RoCE v2" {
			return g.Index, nil
		}
	}
	return 0, fmt.Errorf("no RoCE v2 GID of %s on rxe0: %s", addr, guestkit.GIDList(gs))
}
