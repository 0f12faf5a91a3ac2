//go:build vm

// Package vm is the VM test tier: it boots Debian kernels (6.1, 6.12 and
// trixie-backports' 7.3) under qemu (TCG) with soft-RoCE, runs the guest scenarios under
// integration/vm/scenarios through the real chain (cnitool, ptp, host-local,
// rdma-chain) and turns the guest's marker lines into test results. The
// exclusive-rdma scenario boots with a second NIC and the simrdma test
// module (integration/vm/simrdma, built by prepare.sh against Debian's
// linux-headers), a movable RDMA device; without that module the scenario is
// unavailable, which fails under CI=true. Most scenarios are Go tests run
// in the guest, built here with go test -c (NAME.test from each package
// of guestTests, on integration/vm/guestkit): their scripts run them
// through lib.sh's go_checks, which makes each subtest a check and fails
// the scenario unless the binary ran and its top test passed.
//
//	scripts/vm/prepare.sh                      # once; cached in .cache/vm
//	go test -tags vm -v ./integration/vm/
//
// The caps scenario's boot reports what each kernel offers (SMC, the
// transparent-SMC mechanisms, the RDMA netns operations, the netns-local
// flag); the tier fails unless that equals the kernel's row of the table in
// docs/kernels.md and the kernel's config agrees (kernels_test.go).
//
// Environment: RC_VM_KERNELS (default "6.1,6.12,7.3"), RC_VM_BOOT_TIMEOUT
// (default 180s), RC_VM_PLUGIN (path of a static rdma-chain binary to use
// instead of a fresh build of plugins/meta/rdma-chain or bin/rdma-chain),
// RC_VM_PARALLEL=0 boots one guest at a time (default: every kernel's boots
// in one queue, longest first, one per VM slot that every qemu-booting tier
// shares, internal/testonly/vmslot: one guest per core), RC_VM_ACCEL
// (default tcg,thread=single; multi-threaded TCG hit a kernel int3 Oops in
// text patching on 6.12), RC_VM_APPEND adds kernel command line words
// (rc.load=optional also loads xfrm_user and nfnetlink), RC_VM_SCENARIOS
// (comma-separated scenario names: run only these, including the ones not
// run by default, e.g. "smc" or "demo").
package vm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/internal/testonly/vmslot"

	"github.com/rdma-chain/rdma-chain/pkg/install"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
)

// bootGroup is one boot: several scenarios in one VM, which share the RDMA
// netns mode. exclusive switches the mode, which needs a boot without any
// earlier netns. A boot with simrdma NICs gets that many virtio-net NICs
// (qemu user networking with restrict=on: nothing leaves qemu) and the
// simrdma test module with one device on each (integration/vm/simrdma,
// loaded by init.sh on rc.simrdma=eth0,eth1,...).
type bootGroup struct {
	name      string
	simrdma   int
	scenarios []scenario
}

type scenario struct {
	name        string
	needsPlugin bool
	optIn       bool // runs only when RC_VM_SCENARIOS names it
}

// guestTests are the packages under integration/vm built as test
// binaries (NAME.test) the guest runs.
var guestTests = []string{"crash", "exclusive", "shared", "smcr", "lingjun", "soak", "ops", "upgrade", "caps"}

// bootGroups lists the boots longest first, by mean guest uptime on the
// three kernels: the kernels' boots interleave in the VM slots, and the
// tier ends with its shortest boots, not a long one begun late.
var bootGroups = []bootGroup{
	{"shared-mode", 0, []scenario{{"smoke", false, false}, {"shared", true, false}, {"podres", true, false},
		{"ipv6", true, false}, {"softroce", true, false}, {"crash-softroce", true, false}, {"smc", true, false}, {"upgrade-shared", true, false}, {"demo", true, true}}}, // 85-89 s, 134 s on 7.3 (softroce and crash-softroce serve there)
	{"exclusive-simrdma", 1, []scenario{{"exclusive-rdma", true, false}, {"bond-exclusive", true, false}}},                             // 83 s
	{"crash-simrdma", 1, []scenario{{"crash-rdma", true, false}}},                                                                      // 68 s
	{"soak-simrdma", 1, []scenario{{"soak-exclusive", true, false}}},                                                                   // 53 s
	{"soak-shared", 0, []scenario{{"soak-shared", true, false}}},                                                                       // 49 s
	{"lingjun", 0, []scenario{{"bond", true, false}, {"multi", true, false}}},                                                          // 48 s
	{"upgrade-simrdma", 1, []scenario{{"upgrade-exclusive", true, false}}},                                                             // 32 s
	{"ops-exclusive-simrdma", 1, []scenario{{"ops-exclusive", true, false}, {"ops-repair", true, false}}},                              // 25 s
	{"smc-hook", 0, []scenario{{"smc-hook", true, false}}},                                                                             // 19 s (34 s on 6.12)
	{"multi-exclusive-simrdma", 4, []scenario{{"multi-exclusive", true, false}, {"stranded-exclusive", true, false}}},                  // 72 s (stranded-exclusive 24 s)
	{"ops", 0, []scenario{{"ops", true, false}, {"ops-unseen", true, false}, {"ops-usage", true, false}, {"ops-health", true, false}}}, // 53 s (ops 18 s, ops-usage 35 s)
	{"caps-simrdma", 1, []scenario{{"caps", true, false}}},                                                                             // 15 s
	{"exclusive-mode", 0, []scenario{{"exclusive", true, false}}},                                                                      // 14 s
}

// selected reports whether scenario s runs: RC_VM_SCENARIOS names it, or it
// is not opt-in and RC_VM_SCENARIOS is unset.
func selected(s scenario) bool {
	v := strings.TrimSpace(os.Getenv("RC_VM_SCENARIOS"))
	if v == "" {
		return !s.optIn
	}
	for _, n := range strings.Split(v, ",") {
		if strings.TrimSpace(n) == s.name {
			return true
		}
	}
	return false
}

type prepared struct {
	root    string
	qemu    string
	kernels map[string]string // "6.1" -> kernel tree
	simrdma map[string]string // "6.1" -> simrdma.ko built for it (absent: not built)
	binDir  string            // static guest binaries (fakekubelet, smcctl, rdma-chain)
	plugin  bool              // rdma-chain is among them
	why     string            // why it is not
}

var (
	prepOnce sync.Once
	prep     prepared
	prepErr  error
)

func TestVM(t *testing.T) {
	testenv.RequireRoot(t)
	p := setup(t)
	table := readCapTable(t)
	timeout, err := time.ParseDuration(envOr("RC_VM_BOOT_TIMEOUT", "180s"))
	if err != nil {
		t.Fatalf("RC_VM_BOOT_TIMEOUT: %v", err)
	}
	tierStart := time.Now()
	initrds := buildInitrds(t, p)
	// One queue for every kernel's boots, longest first (bootGroups' order,
	// the kernels interleaved), and one worker per VM slot: no core idles
	// while a boot waits, and the tier ends on its shortest boots.
	var jobs []vmJob
	for _, g := range bootGroups {
		for _, k := range vmKernels() {
			if sel := selectedScenarios(g); len(sel) > 0 {
				jobs = append(jobs, vmJob{kernel: k, group: g, scenarios: sel})
			}
		}
	}
	workers, err := vmslot.Count()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("RC_VM_PARALLEL") == "0" {
		workers = 1
	}
	queue := make(chan vmJob, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	var failMu sync.Mutex
	var failures []string // repeated at the end, where CI's tail shows them
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range queue {
				t.Run("kernel-"+j.kernel+"/"+j.group.name, func(t *testing.T) {
					lines := runGroup(t, p, table, j, initrds[j.kernel], timeout)
					failMu.Lock()
					failures = append(failures, lines...)
					failMu.Unlock()
				})
			}
		})
	}
	wg.Wait()
	t.Logf("VM tier wall time: %.1fs, %d boots, %d at once", time.Since(tierStart).Seconds(), len(jobs), workers)
	if len(failures) > 0 {
		t.Logf("VM tier failures:\n%s", strings.Join(failures, "\n"))
	}
}

type vmJob struct {
	kernel    string
	group     bootGroup
	scenarios []scenario
}

func selectedScenarios(g bootGroup) []scenario {
	var sel []scenario
	for _, s := range g.scenarios {
		if selected(s) {
			sel = append(sel, s)
		}
	}
	return sel
}

// buildInitrds builds each kernel's initramfs (its modules, the scenarios,
// the guest binaries), the kernels side by side.
func buildInitrds(t *testing.T, p prepared) map[string]string {
	t.Helper()
	out := map[string]string{}
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, k := range vmKernels() {
		if _, ok := p.kernels[k]; !ok {
			t.Fatalf("no kernel %q prepared (have %v)", k, keys(p.kernels))
		}
	}
	for _, k := range vmKernels() {
		kdir := p.kernels[k]
		initrd := filepath.Join(t.TempDir(), "initrd-"+k+".cpio.gz")
		wg.Go(func() {
			start := time.Now()
			log, err := runCmd(p.root, []string{"RC_BIN_DIR=" + p.binDir, "SIMRDMA_KO=" + p.simrdma[k]},
				filepath.Join(p.root, "scripts/vm/initramfs.sh"), kdir, initrd,
				filepath.Join(p.root, "integration/vm/scenarios"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[k] = fmt.Errorf("%w\n%s", err, log)
				return
			}
			out[k] = initrd
			t.Logf("kernel %s: initramfs built in %.1fs: %s", k, time.Since(start).Seconds(), strings.TrimSpace(log))
		})
	}
	wg.Wait()
	for k, err := range errs {
		t.Errorf("initramfs.sh for %s: %v", k, err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return out
}

// runGroup boots one group of scenarios on one kernel and returns the
// failed checks' lines.
func runGroup(t *testing.T, p prepared, table capTable, j vmJob, initrd string, timeout time.Duration) []string {
	var run []string
	for _, s := range j.scenarios {
		if !s.needsPlugin || p.plugin {
			run = append(run, s.name)
		}
	}
	if len(run) == 0 {
		testenv.Unavailable(t, "every scenario of %s needs the plugin: %s", j.group.name, p.why)
		return nil
	}
	if j.group.simrdma > 0 && p.simrdma[j.kernel] == "" {
		testenv.Unavailable(t, "no simrdma module built for kernel %s: run scripts/vm/prepare.sh "+
			"(it extracts linux-headers and builds integration/vm/simrdma)", j.kernel)
		return nil
	}
	kdir := p.kernels[j.kernel]
	con := boot(t, p, kdir, initrd, run, j.group.simrdma, timeout)
	if slices.ContainsFunc(j.scenarios, func(s scenario) bool { return s.name == "caps" }) {
		t.Run("table", func(t *testing.T) { assertCaps(t, table, j.kernel, kdir, con) })
	}
	var failures []string
	for _, s := range j.scenarios {
		t.Run(s.name, func(t *testing.T) {
			if s.needsPlugin && !p.plugin {
				testenv.Unavailable(t, "rdma-chain plugin unavailable: %s", p.why)
				return
			}
			failures = append(failures, con.verdict(t, s.name)...)
		})
	}
	return failures
}

// setup checks the prepared cache and builds the guest binaries once.
func setup(t *testing.T) prepared {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(root, ".cache/vm/env")
	env, err := readEnv(envFile)
	if err != nil {
		testenv.Unavailable(t, "VM cache not prepared (%v): run scripts/vm/prepare.sh", err)
	}
	qemu := env["QEMU"]
	if st, err := os.Stat(qemu); qemu == "" || err != nil || st.IsDir() {
		testenv.Unavailable(t, "qemu-system-x86_64 missing (%q): run scripts/vm/prepare.sh", qemu)
	}
	kernels, simrdma := map[string]string{}, map[string]string{}
	for _, k := range vmKernels() {
		v := env["KERNEL_"+strings.ReplaceAll(k, ".", "_")]
		if _, err := os.Stat(filepath.Join(v, ".done")); v == "" || err != nil {
			testenv.Unavailable(t, "kernel %s not prepared (%q): run scripts/vm/prepare.sh", k, v)
		}
		kernels[k] = v
		if ko := env["SIMRDMA_"+strings.ReplaceAll(k, ".", "_")]; ko != "" && fileExists(ko) {
			simrdma[k] = ko
		}
	}
	if _, err := os.Stat(filepath.Join(env["ROOTFS"], ".done")); err != nil {
		testenv.Unavailable(t, "guest userland not prepared: run scripts/vm/prepare.sh")
	}
	for _, b := range []string{".tools/bin/cnitool", ".tools/cni/bin/ptp", ".tools/cni/bin/host-local",
		".tools/cni/bin/ipvlan", ".tools/cni/bin/loopback", ".tools/cni/bin/macvlan"} {
		if _, err := os.Stat(filepath.Join(root, b)); err != nil {
			testenv.Unavailable(t, "%s missing: run scripts/deps.sh", b)
		}
	}
	prepOnce.Do(func() { prep, prepErr = buildBinaries(root) })
	if prepErr != nil {
		t.Fatal(prepErr)
	}
	p := prep
	p.qemu, p.kernels, p.simrdma = qemu, kernels, simrdma
	if !p.plugin {
		t.Logf("rdma-chain plugin not available (%s): only plugin-free scenarios run", p.why)
	}
	return p
}

func buildBinaries(root string) (prepared, error) {
	p := prepared{root: root}
	dir, err := os.MkdirTemp("", "rc-vm-bin-")
	if err != nil {
		return p, err
	}
	p.binDir = dir
	build := func(out, pkg string) error {
		o, err := goIn(root, "build", "-ldflags=-s -w", "-o", filepath.Join(dir, out), pkg)
		if err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, o)
		}
		return nil
	}
	for _, g := range []string{"fakekubelet", "smcctl", "tcpproto", "kcaps", "privexec"} {
		if err := build(g, "./integration/vm/guest/"+g); err != nil {
			return p, err
		}
	}
	// The SMC socket hook's kernel tests run in the guest (this host may
	// not let root load tracing programs).
	if o, err := goIn(root, "test", "-c", "-tags", "smchook", "-ldflags=-s -w",
		"-o", filepath.Join(dir, "hook.test"), "./pkg/smc/hook/"); err != nil {
		return p, fmt.Errorf("go test -c ./pkg/smc/hook: %w\n%s", err, o)
	}
	// The host link lookup tests run in the guest too, with bonds (this
	// host's kernel has no bonding).
	if o, err := goIn(root, "test", "-c", "-ldflags=-s -w",
		"-o", filepath.Join(dir, "netdev.test"), "./pkg/netdev/"); err != nil {
		return p, fmt.Errorf("go test -c ./pkg/netdev: %w\n%s", err, o)
	}
	// The scenarios that are Go tests run in the guest (lib.sh's go_checks).
	for _, g := range guestTests {
		if o, err := goIn(root, "test", "-c", "-ldflags=-s -w",
			"-o", filepath.Join(dir, g+".test"), "./integration/vm/"+g+"/"); err != nil {
			return p, fmt.Errorf("go test -c ./integration/vm/%s: %w\n%s", g, err, o)
		}
	}
	// The crash scenario's plugin: failpoints compiled in (test-only build),
	// always from source, also when RC_VM_PLUGIN names the plugin to test.
	if o, err := goIn(root, "build", "-tags", "failpoint", "-ldflags=-s -w",
		"-o", filepath.Join(dir, "rdma-chain-fp"), "./plugins/meta/rdma-chain"); err != nil {
		return p, fmt.Errorf("go build -tags failpoint ./plugins/meta/rdma-chain: %w\n%s", err, o)
	}
	// The upgrade scenarios attach pods with the newest release's plugin
	// before this tree's takes over, and the reverse (docs/releases.md).
	rels, err := testenv.Releases()
	if err != nil {
		return p, err
	}
	from := rels[len(rels)-1]
	if err := buildAt(root, from, filepath.Join(dir, "rdma-chain-old"), "./plugins/meta/rdma-chain"); err != nil {
		return p, err
	}
	for name, pkg := range map[string]string{hookcmd.Binary: "./cmd/rdma-chain-smc-hook", install.OpsBinary: "./cmd/rdma-chain-ops"} {
		if err := companionBinary(root, dir, name, pkg, build); err != nil {
			return p, err
		}
	}
	switch plug := os.Getenv("RC_VM_PLUGIN"); {
	case plug != "":
		if err := copyFile(plug, filepath.Join(dir, "rdma-chain")); err != nil {
			return p, fmt.Errorf("RC_VM_PLUGIN: %w", err)
		}
		p.plugin = true
	case fileExists(filepath.Join(root, "plugins/meta/rdma-chain")):
		// Built from source every run: bin/rdma-chain may be older than the tree.
		if err := build("rdma-chain", "./plugins/meta/rdma-chain"); err != nil {
			if testenv.InCI() {
				return p, err
			}
			p.why = err.Error()
		} else {
			p.plugin = true
		}
	case fileExists(filepath.Join(root, "bin/rdma-chain")):
		if err := copyFile(filepath.Join(root, "bin/rdma-chain"), filepath.Join(dir, "rdma-chain")); err != nil {
			return p, err
		}
		p.plugin = true
	default:
		p.why = "plugins/meta/rdma-chain does not exist and bin/rdma-chain is not built"
	}
	return p, nil
}

// buildAt builds pkg as this repository had it at release rel's commit
// (from git history: git archive into a temporary tree, so a clone without
// tags builds it too) into out, version-stamped with rel's version.
func buildAt(root string, rel testenv.Release, out, pkg string) error {
	rev := rel.Commit
	src, err := os.MkdirTemp("", "rc-vm-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	o, err := runCmd(root, nil, "bash", "-c", `set -o pipefail; git archive --format=tar "$1" | tar -x -C "$2"`, "bash", rev, src)
	if err != nil {
		return fmt.Errorf("git archive %s (the upgrade scenarios need this commit in the clone's history): %w\n%s", rev, err, o)
	}
	o, err = goIn(src, "build", "-ldflags=-s -w -X main.buildVersion="+rel.Version, "-o", out, pkg)
	if err != nil {
		return fmt.Errorf("go build %s at %s: %w\n%s", pkg, rev, err, o)
	}
	return nil
}

// companionBinary puts one of the binaries built beside the plugin (the SMC
// socket hook, which the plugin runs from its own directory; the operator
// binary) into dir: the one beside RC_VM_PLUGIN, else built from source.
func companionBinary(root, dir, name, pkg string, build func(out, pkg string) error) error {
	if plug := os.Getenv("RC_VM_PLUGIN"); plug != "" {
		if beside := filepath.Join(filepath.Dir(plug), name); fileExists(beside) {
			return copyFile(beside, filepath.Join(dir, name))
		}
	}
	return build(name, pkg)
}

// console is what one boot printed, parsed.
type console struct {
	lines   []string
	steps   map[string]bool   // RC-STEP seen
	passed  map[string]bool   // RC-PASS seen
	failed  map[string]string // RC-FAIL reason
	order   []string
	result  string // "pass", "fail" or "" (none)
	bootErr string // qemu failed or timed out
}

var (
	ansiRE   = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\x1bc`)
	markerRE = regexp.MustCompile(`RC-(STEP|PASS|FAIL|RESULT) ([^\s:]+)(?::\s*(.*))?`)
)

func (c *console) add(line string) {
	c.lines = append(c.lines, line)
	m := markerRE.FindStringSubmatch(line)
	if m == nil {
		return
	}
	name := m[2]
	switch m[1] {
	case "STEP":
		if !c.steps[name] {
			c.order = append(c.order, name)
		}
		c.steps[name] = true
	case "PASS":
		c.passed[name] = true
	case "FAIL":
		c.failed[name] = m[3]
		if !c.steps[name] {
			c.order = append(c.order, name)
		}
	case "RESULT":
		c.result = name
	}
}

// boot runs one VM and streams its console into the test log.
func boot(t *testing.T, p prepared, kdir, initrd string, scenarios []string, simrdma int, timeout time.Duration) *console {
	t.Helper()
	c := &console{steps: map[string]bool{}, passed: map[string]bool{}, failed: map[string]string{}}
	// no_timer_check: under TCG on a busy host the kernel's IO-APIC timer
	// check can miss its ticks and panic at boot (seen on 7.3).
	cmdline := "console=ttyS0 panic=-1 quiet no_timer_check rc.scenario=" + strings.Join(scenarios, ",")
	args := []string{"-accel", envOr("RC_VM_ACCEL", "tcg,thread=single"), "-m", "1024", "-smp", "2",
		"-nographic", "-no-reboot", "-kernel", filepath.Join(kdir, "vmlinuz"), "-initrd", initrd}
	var nics []string
	for i := range simrdma {
		// restrict=on: the guest reaches neither the host nor anything beyond.
		args = append(args, "-netdev", fmt.Sprintf("user,id=n%d,restrict=on,ipv6=off", i), "-device", fmt.Sprintf("virtio-net-pci,netdev=n%d", i))
		nics = append(nics, fmt.Sprintf("eth%d", i))
	}
	if simrdma > 0 {
		cmdline += " rc.simrdma=" + strings.Join(nics, ",")
	}
	args = append(args, "-append", strings.TrimSpace(cmdline+" "+os.Getenv("RC_VM_APPEND")))
	slot, err := vmslot.Acquire(3 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.qemu, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	t.Logf("booting %s rc.scenario=%s (timeout %s) in VM %s after %.0fs waiting for it",
		filepath.Base(kdir), strings.Join(scenarios, ","), timeout, slot.Name, slot.Wait.Seconds())
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(ansiRE.ReplaceAllString(sc.Text(), ""), "\r\n ")
		if line == "" {
			continue
		}
		t.Log(line)
		c.add(line)
	}
	werr := cmd.Wait()
	wall := time.Since(start)
	switch {
	case ctx.Err() != nil:
		c.bootErr = fmt.Sprintf("VM killed after the %s timeout", timeout)
	case werr != nil:
		c.bootErr = fmt.Sprintf("qemu: %v", werr)
	}
	// qemu's CPU time against its wall time: how busy one guest keeps its
	// core, which is what the slots assume.
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	t.Logf("BOOT-WALL %s %s: %.1fs, qemu CPU %.1fs", filepath.Base(kdir), strings.Join(scenarios, ","), wall.Seconds(), cpu.Seconds())
	if c.bootErr != "" {
		t.Errorf("%s", c.bootErr)
	}
	switch c.result {
	case "pass":
	case "":
		// The console's end says why (a panic, a hang): CI's tail shows
		// this message, rarely the console lines far above it.
		t.Errorf("no RC-RESULT line: the guest did not finish; its console ended:\n%s",
			strings.Join(c.lines[max(0, len(c.lines)-20):], "\n"))
	default:
		t.Errorf("RC-RESULT %s", c.result)
	}
	return c
}

// verdict fails t for every check of scenario s that failed or never ended,
// and returns those failures as lines.
func (c *console) verdict(t *testing.T, s string) []string {
	t.Helper()
	var lines []string
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		t.Error(msg)
		lines = append(lines, t.Name()+": "+msg)
	}
	n := 0
	for _, name := range c.order {
		if name != s && !strings.HasPrefix(name, s+"/") {
			continue
		}
		n++
		switch reason, failed := c.failed[name]; {
		case failed:
			fail("RC-FAIL %s: %s", name, reason)
		case !c.passed[name]:
			fail("check %s started but never passed or failed", name)
		}
	}
	if n == 0 {
		fail("scenario %s reported no checks (boot error: %q, result %q)", s, c.bootErr, c.result)
		return lines
	}
	if len(lines) == 0 {
		t.Logf("%d checks passed", n)
	}
	return lines
}
