package ops

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	metricsAddr = "127.0.0.1:9742"
	metricsURL  = "http://" + metricsAddr + "/metrics"
	repairLog   = "/run/reconcile-repair.log"
)

// TestOpsRepair (scenario ops-repair, in ops-exclusive's boot: a second
// NIC and rc.simrdma=eth0): `reconcile --interval 10m
// --metrics-bind-address` runs in the background and finds the network
// itself (NETCONFPATH), as inspect does. A pod gets the NIC (as rdma0)
// and simrdma0; the metrics are scraped over HTTP and parsed with the
// Prometheus text parser; the pod netns is deleted without DEL and the
// time until the NIC is back as eth0 with its addresses and the device
// on it is measured and logged (repair-time; the goal, 5 s under TCG, is
// a number to read, not an assertion: it moves with the machine's load).
// That the repair came from the kernel's event, not from a pass, is
// asserted: rdma_chain_repairs_total{trigger="event"}.
func TestOpsRepair(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	ok := guestkit.Check(t, "exclusive", toExclusive)
	if !guestkit.Check(t, "nic-setup", nicSetUp) || !ok {
		t.Fatal("the node could not be set up: no case runs")
	}
	e := newExcl(t, "repair", "/run/rdma-chain-repair", "/run/ipam-repair", "fd00:98::/64")
	env := []string{"NETCONFPATH=" + e.netDir}
	d, err := guestkit.StartOps(t, repairLog, env, "reconcile", "--cni-bin-dir", cniBinDir, "--interval", "10m",
		"--metrics-bind-address", metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	guestkit.Check(t, "metrics-served", func() error {
		err := guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
			_, err := guestkit.ScrapeMetrics(metricsURL)
			return err
		})
		if err != nil {
			err = fmt.Errorf("no metrics: %w; reconcile's log: %s", err, d.Log())
		}
		return err
	})
	started := d.Log()
	logLines(t, "reconcile log", started)

	e.pod = guestkit.NewPod("repair-", "rpod1")
	guestkit.ExpectOK(t, "add-rpod1", e.c.Add(t, e.pod))
	e.v6 = podV6(t, e.pod, "fd00:98:")
	guestkit.Check(t, "pod-has-v6", func() error {
		if e.v6 == "" {
			return errors.New("rpod1's rdma0 has no fd00:98:: address")
		}
		return nil
	})
	e.inspectFound(t, env)
	e.podMetrics(t)
	e.repair(t, d, started)
	e.repairedMetrics(t)
	guestkit.Check(t, "reconcile-stops", func() error { return d.Stop(10 * time.Second) })
	t.Logf("ops-repair: %.0f s", time.Since(start).Seconds())
}

// inspectFound checks that inspect without a state directory finds the
// network in NETCONFPATH and the pod's attachment in its dataDir; its
// JSON has schema 1 and exclusive mode.
func (e *excl) inspectFound(t *testing.T, env []string) {
	in := inspect(t, "inspect-default", env)
	guestkit.Check(t, "inspect-finds-network", func() error {
		err := in.text.Has("pod default/rpod1  exclusive  netns "+e.pod.NetNS, "link simrdma0 moved as rdma0 (host eth0)")
		if err != nil {
			return err
		}
		a, err := in.attachment("default/rpod1")
		if err == nil && a.DataDir != e.c.DataDir {
			err = fmt.Errorf("rpod1's attachment read from %q, the network's dataDir is %s", a.DataDir, e.c.DataDir)
		}
		return err
	})
	guestkit.Check(t, "inspect-json-schema", func() error {
		if in.err == nil && (in.r.SchemaVersion != 1 || in.r.RDMA.Mode != "exclusive") {
			return fmt.Errorf("schemaVersion %d, mode %q; want 1, exclusive", in.r.SchemaVersion, in.r.RDMA.Mode)
		}
		return in.err
	})
}

// podMetrics checks that a scrape taken after the ADD exports the
// attachment, the ADD's outcome, simrdma0's port in the pod, the mode,
// and the link event source up, with no collect error of the pods.
func (e *excl) podMetrics(t *testing.T) {
	s, err := freshScrape("rdma_chain_attachments", map[string]string{"device": simdev})
	logScrape(t, "scrape-pod", s, err)
	guestkit.Check(t, "metrics-pod", func() error {
		if err != nil {
			return err
		}
		var errs []error
		if !strings.HasPrefix(s.ContentType, "text/plain") {
			errs = append(errs, fmt.Errorf("content type %q, want the text format's text/plain", s.ContentType))
		}
		for _, w := range []struct {
			name   string
			labels map[string]string
			v      float64
		}{
			{"rdma_chain_attachments", map[string]string{"device": simdev, "mode": "exclusive", "network": "rdmanet"}, 1},
			{"rdma_chain_cni_outcomes_total", map[string]string{"code": "0", "network": "rdmanet", "verb": "ADD"}, 1},
			{"rdma_chain_rdma_port_info", map[string]string{"device": simdev, "netns": "pod"}, 1},
			{"rdma_chain_rdma_netns_mode", map[string]string{"mode": "exclusive"}, 1},
			{"rdma_chain_event_source_up", map[string]string{"source": "rtnetlink"}, 1},
			{"rdma_chain_collect_errors", map[string]string{"source": "pods"}, 0},
		} {
			errs = append(errs, s.Want(w.name, w.labels, w.v))
		}
		return errors.Join(errs...)
	})
}

// repair deletes the pod netns without DEL and checks that the kernel
// refunds the NIC (as rdma0) and the device, and reconcile repairs on
// the link event: the NIC is eth0 again with its addresses and simrdma0
// on it, logged as an event's repair; no record or lease is left. logged
// is the part of reconcile's log logged already.
func (e *excl) repair(t *testing.T, d *guestkit.OpsDaemon, logged string) {
	t0 := time.Now()
	guestkit.DelNetNS(t, e.pod)
	err := guestkit.Poll(30*time.Second, 100*time.Millisecond, e.nicBack)
	if err == nil {
		t.Logf("repair-time kernel=%s: NIC back as eth0 with its addresses and simrdma0 on it %d ms after ip netns del",
			rdma.KernelRelease(), time.Since(t0).Milliseconds())
	}
	guestkit.Check(t, "repaired", func() error {
		if err != nil {
			return fmt.Errorf("not repaired in 30 s: %w; init_net links: %s; reconcile's log: %s", err, initNetLinks(), d.Log())
		}
		return nil
	})
	// The NIC is back halfway through the repair's DEL (the leases, the
	// record and the log line follow): what comes after waits for the line.
	var rec guestkit.LogRecord
	logErr := guestkit.Poll(10*time.Second, 100*time.Millisecond, func() (err error) {
		rec, err = guestkit.FindRecord(guestkit.LogRecords(d.Log()), "repaired an attachment", map[string]string{"trigger": "event"})
		return err
	})
	logLines(t, "reconcile log", strings.TrimPrefix(d.Log(), logged))
	guestkit.Check(t, "repair-logged", func() error {
		if logErr != nil {
			return logErr
		}
		if err := releaseOf(rec, "(pod default/rpod1, exclusive, moved simrdma0 as rdma0)", "netns "+e.pod.NetNS+" is gone and "); err != nil {
			return err
		}
		if after, err := time.ParseDuration(rec["afterEvent"]); err != nil || after < 0 {
			return fmt.Errorf("afterEvent %q is no duration since the event", rec["afterEvent"])
		}
		return nil
	})
	guestkit.Check(t, "no-records-left", func() error { return e.c.RecordCount(0) })
	guestkit.Check(t, "lease-gone", func() error { return guestkit.LeaseGone(e.ipamDir, e.v6) })
}

// nicBack checks that eth0 is the NIC again, with both addresses, and
// simrdma0's port is bound to it.
func (e *excl) nicBack() error {
	l, err := netlink.LinkByName(nic)
	if err != nil {
		return fmt.Errorf("no eth0: %w", err)
	}
	if l.Attrs().HardwareAddr.String() != e.mac {
		return fmt.Errorf("eth0 has MAC %s, the NIC's is %s", l.Attrs().HardwareAddr, e.mac)
	}
	return errors.Join(hasAddrs(nic, nicAddrs...), guestkit.BoundTo(simdev, nic))
}

// repairedMetrics checks that a scrape taken after the repair counts
// one repair by event and its duration, link events, simrdma0's port
// back in the host and no attachment; the RDMA monitor is a source
// where the kernel has it (Linux 6.11 and later; 6.1 has not).
func (e *excl) repairedMetrics(t *testing.T) {
	repairs := map[string]string{"network": "rdmanet", "trigger": "event"}
	s, err := freshScrape("rdma_chain_repairs_total", repairs)
	logScrape(t, "scrape-after", s, err)
	if err == nil {
		if d := s.Find("rdma_chain_repair_duration_seconds_sum", nil); len(d) == 1 {
			t.Logf("repair-time kernel=%s: link event -> DEL done %.2f s (rdma_chain_repair_duration_seconds_sum)", rdma.KernelRelease(), d[0].Value)
		}
		t.Logf("events: %v", s.Find("rdma_chain_events_total", nil))
	}
	guestkit.Check(t, "metrics-repaired", func() error {
		if err != nil {
			return err
		}
		errs := []error{s.Want("rdma_chain_repairs_total", repairs, 1),
			s.Want("rdma_chain_repair_duration_seconds_count", nil, 1),
			s.Want("rdma_chain_rdma_port_info", map[string]string{"device": simdev, "netns": "host"}, 1)}
		if ev := s.Find("rdma_chain_events_total", map[string]string{"source": "rtnetlink"}); len(ev) != 1 || ev[0].Value < 1 {
			errs = append(errs, fmt.Errorf("rtnetlink events %v, want a count of at least 1", ev))
		}
		return errors.Join(errs...)
	})
	guestkit.Check(t, "metrics-no-attachment", func() error {
		if a := s.Find("rdma_chain_attachments", nil); err == nil && len(a) > 0 {
			return fmt.Errorf("attachments still exported: %v", a)
		}
		return err
	})
	guestkit.Check(t, "rdma-monitor", func() error {
		if err != nil {
			return err
		}
		up := 1.0
		if strings.HasPrefix(rdma.KernelRelease(), "6.1.") {
			up = 0
		}
		return s.Want("rdma_chain_event_source_up", map[string]string{"source": "rdma"}, up)
	})
}

// freshScrape polls, for 10 s, for a scrape with a sample name with
// labels: the server answers from a collection up to 2 s old, so the
// first scrape after a change may not show it.
func freshScrape(name string, labels map[string]string) (guestkit.Scrape, error) {
	var s guestkit.Scrape
	err := guestkit.Poll(10*time.Second, 200*time.Millisecond, func() error {
		var err error
		if s, err = guestkit.ScrapeMetrics(metricsURL); err != nil {
			return err
		}
		if len(s.Find(name, labels)) == 0 {
			return fmt.Errorf("no sample %s in the scrape", guestkit.Sample{Name: name, Labels: labels}.Series())
		}
		return nil
	})
	return s, err
}

// logScrape logs a scrape's samples, or why there is none.
func logScrape(t *testing.T, label string, s guestkit.Scrape, err error) {
	t.Helper()
	if err != nil {
		t.Logf("%s: %v", label, err)
	}
	for _, l := range s.Lines() {
		t.Logf("%s: %s", label, l)
	}
}

// logLines logs each line of out.
func logLines(t *testing.T, label, out string) {
	t.Helper()
	if out = strings.TrimRight(out, "\n"); out == "" {
		return
	}
	for _, l := range strings.Split(out, "\n") {
		t.Logf("%s: %s", label, l)
	}
}
