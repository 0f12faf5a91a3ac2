package caps

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/inspect"
)

const (
	netDir  = "/etc/cni/net.d-caps"
	dataDir = "/run/rdma-chain-caps"
	metrics = "http://127.0.0.1:9742/metrics"
	pins    = "/sys/fs/bpf/rdma-chain"
)

// mechanisms reads the transparent-SMC mechanism as the plugin's STATUS
// (twice: the second reuses the first's probe, kept in the state
// directory), inspect and the reconcile daemon's metrics name it, and
// checks the daemon holds the socket hook exactly where it is the
// mechanism.
func (p *probe) mechanisms(t *testing.T) {
	list, err := guestkit.Conflist("1.1.0", `"mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"`+dataDir+`"`)
	if err == nil {
		_, err = guestkit.WriteConflist(netDir, list)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := guestkit.NewChain(guestkit.BinDir)
	var took []string
	for _, name := range []string{"status", "status-again"} {
		guestkit.Check(t, name, func() error {
			if err := c.Status(list); err != nil {
				return err
			}
			mech, d, err := statusMechanism(string(c.Stderr))
			if err == nil && p.transparent["status"] != "" && p.transparent["status"] != mech {
				mech = p.transparent["status"] + "/" + mech
			}
			p.transparent["status"], took = mech, append(took, d)
			return err
		})
	}
	t.Logf("STATUS took %v probing SMC, %v with the kept probe", took[0], took[len(took)-1])
	guestkit.RunOps(t, "inspect", nil, "inspect", "--data-dir", dataDir)
	guestkit.Check(t, "inspect-json", func() error {
		r := guestkit.RunOpsQuiet(t, "inspect --json", nil, "inspect", "--data-dir", dataDir, "--json")
		var rep inspect.Report
		if err := errors.Join(r.Exit(0), json.Unmarshal([]byte(r.Stdout), &rep)); err != nil {
			return err
		}
		p.transparent["inspect"] = string(rep.SMC.Transparent)
		return nil
	})
	p.daemon(t)
}

// statusMechanism is the mechanism STATUS's "SMC-R: ..." log record names
// and STATUS's own duration.
func statusMechanism(log string) (mech, took string, err error) {
	recs := guestkit.LogRecords(log)
	for _, r := range recs {
		if r["verb"] == "STATUS" && r["duration"] != "" {
			took = r["duration"]
		}
		if mech == "" && r["mechanism"] != "" && len(r["msg"]) > 6 && r["msg"][:6] == "SMC-R:" {
			mech = r["mechanism"]
		}
	}
	if mech == "" {
		err = fmt.Errorf("STATUS logged no SMC-R mechanism: %s", log)
	}
	return mech, took, err
}

// daemon runs reconcile with its metrics as the DaemonSet does, reads
// the mechanism its metrics name, and checks the socket hook is held
// exactly where that is the mechanism, and released by the hook binary
// after the daemon exits.
func (p *probe) daemon(t *testing.T) {
	d, err := guestkit.StartOps(t, "/run/reconcile-caps.log", []string{"NETCONFPATH=" + netDir},
		"reconcile", "--cni-bin-dir", guestkit.BinDir, "--interval", "10m", "--metrics-bind-address", "127.0.0.1:9742")
	if err != nil {
		t.Fatal(err)
	}
	guestkit.Check(t, "metrics-served", func() error {
		return guestkit.Poll(30*time.Second, 200*time.Millisecond, func() error {
			s, err := guestkit.ScrapeMetrics(metrics)
			if err == nil {
				for _, m := range s.Find("rdma_chain_smc_transparent_info", nil) {
					p.transparent["metrics"] = m.Labels["mechanism"]
				}
			}
			return err
		})
	})
	hook := p.transparent["metrics"] == "socket_hook"
	guestkit.Check(t, "smc-hook-held", func() error { return held(d, hook) })
	if err := d.Stop(10 * time.Second); err != nil {
		t.Error(err)
	}
	if hook {
		guestkit.Check(t, "smc-hook-held-after-exit", func() error { _, err := os.Stat(pins + "/smc_link"); return err })
		guestkit.Check(t, "smc-hook-release", func() error {
			out, err := exec.Command("rdma-chain-smc-hook", "release", pins).CombinedOutput()
			if err != nil {
				return fmt.Errorf("rdma-chain-smc-hook release: %w: %s", err, out)
			}
			return nil
		})
		guestkit.Check(t, "smc-hook-detached", func() error {
			_, err := os.Stat(pins)
			switch {
			case err == nil:
				return fmt.Errorf("%s still there after release", pins)
			case errors.Is(err, os.ErrNotExist):
				return nil
			}
			return err
		})
	}
}

// held checks that the daemon decided about the hook (its log), and
// holds it (log, the rdma_chain_smc_socket_hook_held metric, the pins)
// where hook, and nowhere else. A scrape's result is reused for 2 s:
// the held one may come later.
func held(d *guestkit.OpsDaemon, hook bool) error {
	var decided guestkit.LogRecord
	err := guestkit.Poll(60*time.Second, 200*time.Millisecond, func() error {
		for _, r := range guestkit.LogRecords(d.Log()) {
			if r["bpffsDir"] == pins && (r["msg"] == "SMC socket hook not held" || len(r["msg"]) > 34 && r["msg"][:34] == "holding the SMC socket hook loaded") {
				decided = r
				return nil
			}
		}
		return fmt.Errorf("no hold decision: %s", d.Log())
	})
	if err != nil {
		return err
	}
	holding := decided["msg"] != "SMC socket hook not held"
	// Held: exactly one sample, 1. Not held: none (the daemon may not
	// read the hook where the kernel cannot run it) or 0.
	metricErr := guestkit.Poll(30*time.Second, time.Second, func() error {
		s, err := guestkit.ScrapeMetrics(metrics)
		if err != nil || hook {
			return errors.Join(err, s.Want("rdma_chain_smc_socket_hook_held", nil, 1))
		}
		for _, m := range s.Find("rdma_chain_smc_socket_hook_held", nil) {
			if m.Value != 0 {
				return fmt.Errorf("%s", m)
			}
		}
		return nil
	})
	_, pinErr := os.Stat(pins)
	switch {
	case hook && (!holding || metricErr != nil || pinErr != nil):
		return fmt.Errorf("hook not held where auto uses it (decision %v): %w", decided, errors.Join(metricErr, pinErr))
	case !hook && (holding || metricErr != nil):
		return fmt.Errorf("hook held where auto does not use it (decision %v): %w", decided, metricErr)
	case !hook && pinErr == nil:
		return fmt.Errorf("hook pinned at %s where auto does not use it (decision %v)", pins, decided)
	}
	return nil
}
