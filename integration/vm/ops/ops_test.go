// Package ops is the VM tier's scenarios of the operator commands
// (rdma-chain-ops), run in its guests. The commands are what is under
// test: each runs as the binary an operator runs
// (/usr/local/bin/rdma-chain-ops), its output is logged, and its text,
// exit status and, where it has one, its JSON (inspect --json, read as
// docs/operations.md documents it) are checked; the node is read through
// netlink, sysfs, pkg/rdma and SMC's netlink, never by parsing a tool's
// text.
//
// TestOps (scenario ops): shared mode with soft-RoCE and SMC. validate
// and install on conflists; a pod with SMC-R (an ipvlan child with IPv6
// from host-local, pnet entries), a pod whose ADD fails (deviceID naming
// no offered device, 103), a third pod; inspect and inspect --netns show
// them; the third pod's netns is deleted behind the plugin's back and
// reconcile --once without CRI releases its attachment (record and IPv6
// lease) and keeps the others.
//
// TestOpsExclusive (scenario ops-exclusive, exclusive_test.go) and
// TestOpsRepair (scenario ops-repair, repair_test.go): the same commands
// in exclusive mode with the simrdma test device on a virtio-net NIC,
// and reconcile repairing on a kernel event with its metrics.
package ops

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

const (
	opsNetDir  = "/etc/cni/net.d-ops"
	opsConf    = opsNetDir + "/rdmanet.conflist"
	opsDataDir = "/run/rdma-chain-ops"
	opsV6IPAM  = "/run/ipam-ops-rdma" // rdma-chain's own host-local: rdma0's leases
	opsUEID    = "RDMACHAIN-OPS"
	cniBinDir  = "/opt/cni/bin"
)

// opsConflist is ptp + host-local and rdma-chain in shared mode with
// SMC-R (its UEID), rdma0's IPv6 from host-local, and the annotation and
// deviceID capabilities.
const opsConflist = `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.98.0.0/24"}]],"dataDir":"/run/ipam-ops"}},
 {"type":"rdma-chain","mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"` + opsDataDir + `",
  "sharedLink":{"type":"ipvlan"},"smcr":{"ueid":"` + opsUEID + `"},
  "ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:78::/64"}]],"dataDir":"` + opsV6IPAM + `"},
  "capabilities":{"io.kubernetes.cri.pod-annotations":true,"deviceID":true}}
]}
`

// shared is TestOps's pods and what it learnt of them.
type shared struct {
	c                  *guestkit.Calls
	smc, fail, stale   guestkit.Pod
	smcV6, staleV6     string // rdma0's addresses, read in the pods
	smcOn              bool   // the kernel has SMC
	smcNode, smcNodeIB string // what inspect says of SMC for the node
}

func TestOps(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("rxe0 could not be set up: no case runs")
	}
	s := &shared{c: guestkit.NewCalls(t, "1.0.0", opsDataDir), smcOn: guestkit.HasSMC(),
		smc:   guestkit.NewPod("ops-", "ops-smc"),
		fail:  guestkit.NewPod("ops-", "ops-fail"),
		stale: guestkit.NewPod("ops-", "ops-stale")}
	// What inspect says of SMC: the node's table, or, on a kernel without
	// SMC (docs/kernels.md), that SMC is not available.
	s.smcNode, s.smcNodeIB = "SMC: not available (", "SMC: not available"
	if s.smcOn {
		guestkit.Check(t, "smc-module", func() error {
			_, err := guestkit.Pnet("") // SMC's netlink family answers
			return err
		})
		s.smcNode, s.smcNodeIB = "SMC: available; UEIDs: "+opsUEID, " ib rxe0 port 1"
	}
	if !writeConflist(t, s.c, opsConf, []byte(opsConflist)) {
		t.Fatal("no conflist: no case runs")
	}
	validateInstall(t)
	s.addPods(t)
	s.inspectPods(t)
	s.reconcileStale(t)
	for _, p := range []guestkit.Pod{s.smc, s.fail} {
		guestkit.ExpectOK(t, "del-"+p.Name, s.c.Gone(t, p))
	}
	guestkit.Check(t, "no-records-left", func() error { return s.c.RecordCount(0) })
	t.Logf("ops: %.0f s", time.Since(start).Seconds())
}

// validateInstall checks that validate passes the scenario's conflist;
// install inserts the entry into a primary's conflist once and then
// leaves it unchanged; validate passes the result and names an unknown
// key by its place with a suggestion.
func validateInstall(t *testing.T) {
	v := guestkit.RunOps(t, "validate", nil, "validate", opsConf, "--cni-bin-dir", cniBinDir)
	guestkit.Check(t, "validate-ok", func() error { return v.Exit(0) })

	const target = "/tmp/ops-install.conflist"
	if err := os.WriteFile(target, []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[`+"\n"+`  {"type":"ptp"}`+"\n]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set := `{"mode":"shared","sharedLink":{"type":"none"}}`
	in := guestkit.RunOps(t, "install", nil, "install", "--conflist", target, "--after", "ptp", "--set", set)
	installed, readErr := os.ReadFile(target)
	guestkit.Check(t, "install-inserted", func() error {
		return errors.Join(in.Exit(0), in.Has("rdma-chain entry inserted"), readErr, entryAfterPtp(installed))
	})
	again := guestkit.RunOps(t, "install-again", nil, "install", "--conflist", target, "--after", "ptp", "--set", set)
	guestkit.Check(t, "install-idempotent", func() error {
		now, err := os.ReadFile(target)
		if err == nil && string(now) != string(installed) {
			err = fmt.Errorf("the second install changed %s:\n%s\nto\n%s", target, installed, now)
		}
		return errors.Join(again.Exit(0), again.Has("unchanged"), err)
	})
	vi := guestkit.RunOps(t, "validate-installed", nil, "validate", target)
	guestkit.Check(t, "validate-installed", func() error { return vi.Exit(0) })

	const bad = "/tmp/ops-bad.conflist"
	if err := os.WriteFile(bad, []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","Mode":"shared"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vb := guestkit.RunOps(t, "validate-bad", nil, "validate", bad)
	guestkit.Check(t, "validate-bad-key", func() error {
		return errors.Join(vb.Exit(1), vb.Has(bad+`:1:81: unknown key "Mode": did you mean "mode"?`))
	})
}

// addPods checks that the SMC-R pod and the stale one attach, with
// rdma0's IPv6 address leased; the pod asking for a device not offered
// gets 103.
func (s *shared) addPods(t *testing.T) {
	s.smc.Caps = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"network.alibabacloud.com/erdma-smcr": "true"}}
	guestkit.ExpectOK(t, "add-ops-smc", s.c.Add(t, s.smc))
	s.smcV6 = podV6(t, s.smc, "fd00:78:")
	s.fail.Caps = map[string]any{"deviceID": "mlx5_9"}
	guestkit.ExpectCode(t, "add-ops-fail", s.c.Add(t, s.fail), 103, "mlx5_9")
	guestkit.ExpectOK(t, "add-ops-stale", s.c.Add(t, s.stale))
	s.staleV6 = podV6(t, s.stale, "fd00:78:")
	guestkit.Check(t, "stale-lease", func() error {
		if s.staleV6 == "" {
			return errors.New("ops-stale's rdma0 has no fd00:78:: address")
		}
		_, err := os.Stat(opsV6IPAM + "/rdmanet/" + s.staleV6)
		return err
	})
}

// inspectPods checks that inspect shows the node (mode, rxe0, SMC), the
// SMC-R pod's attachment, the failed ADD, everything healthy; inspect
// --netns the SMC-R pod's rdma0 with its GID and its SMC tables.
func (s *shared) inspectPods(t *testing.T) {
	in := inspect(t, "inspect", nil, "--data-dir", opsDataDir)
	guestkit.Check(t, "inspect-node", func() error { return s.node(in) })
	guestkit.Check(t, "inspect-smc-pod", func() error { return s.smcPod(in) })
	if !s.smcOn {
		guestkit.Check(t, "inspect-no-smc-pnetid", func() error { return in.text.Lacks("SMC-R pnetid") })
	}
	guestkit.Check(t, "inspect-failure", func() error {
		err := in.text.Has("  default/ops-fail  ADD  code 103  at ", "mlx5_9")
		if err != nil || in.err != nil {
			return errors.Join(err, in.err)
		}
		if !slices.ContainsFunc(in.r.Failures, func(f failure) bool {
			return f.Pod == "default/ops-fail" && f.Verb == "ADD" && f.Code == 103 && strings.Contains(f.Msg, "mlx5_9")
		}) {
			return fmt.Errorf("lastFailures lacks ops-fail's ADD with 103 naming mlx5_9: %+v", in.r.Failures)
		}
		return nil
	})
	guestkit.Check(t, "inspect-all-healthy", in.healthy)
	// rxe adds the child's GID on a netdev event
	gid := guestkit.GIDOf(s.smcV6)
	guestkit.Check(t, "gid-ops-smc", func() error {
		return guestkit.Poll(20*time.Second, 100*time.Millisecond, func() error { return guestkit.HasGID("rxe0", gid, "rdma0") })
	})
	ns := inspect(t, "inspect-netns", nil, "--data-dir", opsDataDir, "--netns", s.smc.NetNS)
	guestkit.Check(t, "inspect-netns", func() error { return s.smcNetns(ns, gid) })
	guestkit.Check(t, "inspect-json", func() error {
		if in.err != nil {
			return in.err
		}
		a, err := in.attachment("default/ops-smc")
		switch {
		case err != nil:
			return err
		case in.r.SchemaVersion != 1 || in.r.RDMA.Mode != "shared" || !a.Healthy:
			return fmt.Errorf("schemaVersion %d, mode %q, ops-smc healthy %v; want 1, shared, true", in.r.SchemaVersion, in.r.RDMA.Mode, a.Healthy)
		case !slices.ContainsFunc(in.r.Failures, func(f failure) bool { return f.Code == 103 }):
			return fmt.Errorf("lastFailures has no code 103: %+v", in.r.Failures)
		}
		return nil
	})
}

// node checks inspect's node part, text and JSON: shared mode, rxe0 on
// veth0 in init_net with port 1 ACTIVE, and SMC with the UEID and
// rxe0's pnet entry, or why SMC is not available.
func (s *shared) node(in inspected) error {
	err := in.text.Has("RDMA netns mode: shared", "  rxe0  driver rdma_rxe  netdev veth0  netns host  port 1 ACTIVE", s.smcNode, s.smcNodeIB)
	if err != nil {
		return err
	}
	d, err := in.device("rxe0")
	if err != nil {
		return err
	}
	if in.r.RDMA.Mode != "shared" || d.Driver != "rdma_rxe" || d.Netdev != "veth0" || d.Netns != "host" ||
		len(d.Ports) == 0 || d.Ports[0].Port != 1 || d.Ports[0].State != "ACTIVE" {
		return fmt.Errorf("mode %q, rxe0 %+v; want shared, rdma_rxe on veth0 in host, port 1 ACTIVE", in.r.RDMA.Mode, d)
	}
	smc := in.r.SMC
	switch {
	case smc.Available != s.smcOn:
		return fmt.Errorf("smc.available %v, the kernel has SMC: %v", smc.Available, s.smcOn)
	case !s.smcOn && smc.Reason == "":
		return errors.New("SMC not available and no reason given")
	case s.smcOn && !slices.Contains(smc.UEIDs, opsUEID):
		return fmt.Errorf("smc.ueids %q lack %s", smc.UEIDs, opsUEID)
	case s.smcOn && !slices.ContainsFunc(smc.Pnet, func(p pnetRow) bool { return p.IB == "rxe0" && p.IBPort == 1 }):
		return fmt.Errorf("smc.pnet has no row of rxe0 port 1: %+v", smc.Pnet)
	}
	return nil
}

// smcPod checks that inspect lists ops-smc's attachment: an ipvlan child
// of veth0 on rxe0 as rdma0 with its address, SMC-R pnet entries where
// the kernel has SMC (the pod attached without them where not:
// onUnsupported warn).
func (s *shared) smcPod(in inspected) error {
	smcText := "link rxe0 ipvlan as rdma0 (host veth0) ips fd00:78:"
	if s.smcOn {
		smcText = "SMC-R pnetid "
	}
	err := in.text.Has("pod default/ops-smc  shared  netns "+s.smc.NetNS, "link rxe0 ipvlan as rdma0 (host veth0) ips fd00:78:", smcText)
	if err != nil {
		return err
	}
	a, err := in.attachment("default/ops-smc")
	if err != nil {
		return err
	}
	if a.Mode != "shared" || a.NetNS != s.smc.NetNS || len(a.Links) != 1 || !a.Healthy {
		return fmt.Errorf("ops-smc's attachment %+v; want shared, netns %s, one link, healthy", a, s.smc.NetNS)
	}
	l := a.Links[0]
	if l.Device != "rxe0" || l.Kind != "ipvlan" || l.PodName != "rdma0" || l.Host != "veth0" || l.Step != "done" ||
		!slices.Contains(l.IPs, s.smcV6+"/64") {
		return fmt.Errorf("ops-smc's link %+v; want rxe0 ipvlan as rdma0 on veth0 with %s/64, step done", l, s.smcV6)
	}
	if (a.SMCR != "") != s.smcOn {
		return fmt.Errorf("ops-smc's smcr %q on a kernel with SMC %v", a.SMCR, s.smcOn)
	}
	return nil
}

// smcNetns checks that inspect --netns shows ops-smc's rdma0 up, an RDMA
// interface with its address's GID on rxe0, and where the kernel has SMC
// the pod's pnet entry for eth0, net.smc.* and the fallback counters;
// where not, an empty pnet table.
func (s *shared) smcNetns(ns inspected, gid string) error {
	smcText := []string{"  pnet table (0):"}
	if s.smcOn {
		smcText = []string{" eth eth0", "  net.smc:", "SMC fallbacks to TCP:"}
	}
	err := errors.Join(ns.text.Has(append([]string{"Netns " + s.smc.NetNS + ":", "  rdma0 ipvlan up", "[RDMA]",
		"    GID rxe0 port 1 index ", "RoCE v2"}, smcText...)...), ns.exit(0))
	if err != nil {
		return err
	}
	i, err := ns.netnsIface(s.smc.NetNS, "rdma0")
	if err != nil {
		return err
	}
	if i.Kind != "ipvlan" || !i.Up || !i.RDMA || !slices.Contains(i.Addrs, s.smcV6+"/64") {
		return fmt.Errorf("rdma0 in ops-smc %+v; want ipvlan, up, RDMA, %s/64", i, s.smcV6)
	}
	if err := hasGID(i, "rxe0", gid); err != nil {
		return err
	}
	n := ns.r.Netns
	hasEth0 := slices.ContainsFunc(n.Pnet, func(p pnetRow) bool { return p.Eth == "eth0" })
	switch {
	case s.smcOn && (!hasEth0 || len(n.SMCSysctls) == 0 || len(n.Fallbacks) == 0 || string(n.Fallbacks) == "null"):
		return fmt.Errorf("ops-smc's SMC: pnet %+v, net.smc %v, fallbacks %s; want eth0's entry, sysctls, counters", n.Pnet, n.SMCSysctls, n.Fallbacks)
	case !s.smcOn && len(n.Pnet) != 0:
		return fmt.Errorf("pnet rows %+v in ops-smc on a kernel without SMC", n.Pnet)
	}
	return nil
}

// reconcileStale deletes ops-stale's netns behind the plugin's back and
// checks that inspect says so and exits 1, that reconcile --once
// without CRI releases its attachment (record and lease) and keeps
// ops-smc's, and a second pass has nothing to do.
func (s *shared) reconcileStale(t *testing.T) {
	guestkit.DelNetNS(t, s.stale)
	st := inspect(t, "inspect-stale", nil, "--data-dir", opsDataDir)
	guestkit.Check(t, "inspect-stale", func() error { return st.stale("default/ops-stale", s.stale.NetNS) })
	guestkit.Check(t, "inspect-stale-exit", func() error { return st.exit(1) })

	recs, _ := s.c.Records()
	rc := guestkit.RunOps(t, "reconcile", nil, "reconcile", "--conflist", opsConf, "--cni-bin-dir", cniBinDir, "--once")
	guestkit.Check(t, "reconcile-released", func() error {
		return released(rc, "released an attachment", "(pod default/ops-stale, shared, ipvlan rxe0 as rdma0)", s.stale.NetNS,
			map[string]string{"released": "1", "kept": "1", "problems": "0", "liveness": "netns"})
	})
	guestkit.Check(t, "reconcile-exit", func() error { return rc.Exit(0) })
	guestkit.Check(t, "reconcile-record-gone", func() error { return s.c.RecordCount(len(recs) - 1) })
	guestkit.Check(t, "reconcile-lease-gone", func() error { return guestkit.LeaseGone(opsV6IPAM, s.staleV6) })
	guestkit.Check(t, "reconcile-kept-pod", func() error {
		_, err := guestkit.PodLink(s.smc.NetNS, "rdma0")
		return err
	})
	again := guestkit.RunOps(t, "reconcile-again", nil, "reconcile", "--conflist", opsConf, "--cni-bin-dir", cniBinDir, "--once")
	guestkit.Check(t, "reconcile-idempotent", func() error {
		return errors.Join(again.Exit(0), released(again, "", "", "", map[string]string{"released": "0", "kept": "1", "problems": "0"}))
	})
	after := inspect(t, "inspect-after", nil, "--data-dir", opsDataDir)
	guestkit.Check(t, "inspect-after-healthy", after.healthy)
}
