package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/cri"
	"github.com/rdma-chain/rdma-chain/pkg/install"
	"github.com/rdma-chain/rdma-chain/pkg/metrics"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const criTimeout = 10 * time.Second

// ErrProblems means a pass found problems (releases that failed, things it
// could not read); its log says which.
var ErrProblems = errors.New("the pass found problems")

// Options say what Run reconciles and how.
type Options struct {
	// Conflists name the networks by their rdma-chain entries
	// (conflist.Auto: the primary's conflist in ConfDir); NetName and
	// DataDir name one without a conflist; without either, the entries of
	// the conflists in ConfDir.
	Conflists        []string
	ConfDir          string
	NetName, DataDir string
	// Networks, when set, are the networks to reconcile, as read before
	// (uninstall's, whose entry is draining), instead of any of the above.
	Networks []conflist.Network
	// EnsureEntry puts the entry back, before each pass, into each of
	// Conflists that lost it (after the last plugin of type After, with
	// the keys of Set).
	EnsureEntry bool
	After       string
	Set         []byte
	// CRISocket is the runtime's CRI socket ("": a pod is gone when its
	// netns is).
	CRISocket string
	// CNIPath is CNI_PATH for the IPAM plugin that releases leases.
	CNIPath string
	// IPAMDirsUnder, when set, is the directory this process sees the
	// node's IPAM leases under (the DaemonSet mounts /var/lib/cni): a
	// network whose host-local keeps them elsewhere is a problem of every
	// pass, since the leases it releases would be the container's, not
	// the node's.
	IPAMDirsUnder string
	// MinAge is the age below which, with CRISocket, an attachment is
	// kept.
	MinAge time.Duration
	// Interval runs a pass every interval until ctx ends, and repairs on
	// kernel events between passes; 0 runs one pass.
	Interval time.Duration
	// HoldSMCHook, with Interval, holds the SMC socket hook's program
	// attached before each pass wherever an entry's smcr.transparent uses
	// it on this kernel, so that SMC-R pods' ADD do not load it.
	HoldSMCHook bool
	// Metrics, with Interval, serves /metrics and /healthz.
	Metrics metrics.Options
	// LivenessGrace is how long CRI may be unreachable before /healthz
	// fails.
	LivenessGrace time.Duration
	// Version is the binary's, for the build info metric.
	Version string
	// Stderr receives the plugin's own log lines.
	Stderr io.Writer
}

// node is the reconciler's seam over the node it runs on: the runtime that
// lists the pod sandboxes, the plugin's DEL, the kernel's netns and
// devices, the clock.
type node interface {
	Sandboxes(ctx context.Context, criSocket string) ([]cri.Sandbox, error)
	// NetnsGone is state.Record.NetnsGone on the node.
	NetnsGone(rec *state.Record) (bool, error)
	// NetnsReplaced is state.Record.NetnsReplaced on the node.
	NetnsReplaced(rec *state.Record) (bool, error)
	Del(args *skel.CmdArgs) error
	Now() time.Time
	// Stranded says why rec is an exclusive-mode attachment whose pod
	// netns died and whose device the kernel refunded ("" if it is not).
	Stranded(rec *state.Record) (string, error)
	// Watch starts the kernel's event sources, which fire into sink until
	// ctx ends; a node without any starts none (the interval only).
	Watch(ctx context.Context, sink eventSink)
	// HookHeld reports whether the SMC socket hook in the bpffs directory
	// is held attached; HoldHook holds it where the kernel gives the
	// smcr.transparent mode the hook (errHookUnused elsewhere).
	HookHeld(dir string) (bool, error)
	HoldHook(dir, mode string) (took bool, err error)
}

// reconciler releases the attachments of pods that are gone.
type reconciler struct {
	nets      []conflist.Network
	criSocket string
	version   string
	cniPath   string
	minAge    time.Duration
	ipamUnder string
	log       *slog.Logger
	reload    func() error // nil: the networks never change
	metrics   *metrics.Reconcile
	// mu serialises passes and repairs; netsMu guards nets, which reload
	// replaces while the metrics handler reads them.
	mu, netsMu sync.Mutex
	node       node
	cri        criHealth
	// holdSMCHook is Options.HoldSMCHook. hookUnused are the bpffs
	// directories whose socket hook the kernel does not use; the loop's
	// alone.
	holdSMCHook bool
	hookUnused  map[string]bool
	// bootIDPath is the file the kernel's boot id is read from ("":
	// state.BootIDFile).
	bootIDPath string
	// unverified are the attachments CRI lists whose netns this process
	// cannot read, with the reason already said; the passes' alone.
	unverified map[state.Key]string
	// releaseErrs are the attachments whose release failed, with the
	// error already said; the passes' alone.
	releaseErrs map[state.Key]string
	// reloadErr is the last failure of reloadNetworks, said once.
	reloadErr string
}

// Run reconciles as o says, logging to out (slog's text lines, as the
// plugin's and the DRA driver's), until ctx ends (with an
// Interval) or after one pass. It returns ErrProblems when the one pass
// found problems, and other errors when it cannot start.
func Run(ctx context.Context, o Options, out io.Writer) error {
	m := metrics.NewReconcile()
	log := slog.New(slog.NewTextHandler(out, nil))
	confChanged := make(chan struct{}, 1)
	load := o.loader(m, log, newRestoreBackoff(confChanged))
	nets, err := load()
	if err != nil {
		return err
	}
	r := &reconciler{nets: nets, criSocket: o.CRISocket, version: o.Version, cniPath: o.CNIPath, minAge: o.MinAge,
		ipamUnder: o.IPAMDirsUnder, log: log, metrics: m, node: newKernelNode(o.Stderr), holdSMCHook: o.HoldSMCHook}
	r.cri = criHealth{grace: o.LivenessGrace, lastOK: time.Now()}
	if o.Interval == 0 {
		return r.passErr(ctx)
	}
	// A conflist may be rewritten (Terway regenerates its own): read it
	// again before every pass, keeping the last good one.
	r.reload = func() error {
		nets, err := load()
		if err == nil {
			r.setNetworks(nets)
		}
		return err
	}
	if o.Metrics.Addr != "" {
		if err := r.serveMetrics(ctx, o.Metrics); err != nil {
			return err
		}
	}
	if o.EnsureEntry {
		watchConfDirs(ctx, conflistDirs(o.Conflists, o.ConfDir), confChanged, log)
	}
	r.loop(ctx, o.Interval, confChanged)
	return nil
}

// loader returns what reads the networks before each pass: the conflists
// named (their entries put back first with EnsureEntry), or those of
// ConfDir with an entry, or NetName's; backoff paces the entries put back.
func (o Options) loader(m *metrics.Reconcile, log *slog.Logger, backoff *restoreBackoff) func() ([]conflist.Network, error) {
	return func() ([]conflist.Network, error) {
		if len(o.Networks) > 0 {
			return o.Networks, nil
		}
		paths, err := resolveConflists(o.Conflists, o.ConfDir)
		if err != nil {
			return nil, err
		}
		if o.EnsureEntry {
			ensureEntries(paths, o, m, backoff, log)
		}
		if len(paths) == 0 && o.NetName == "" {
			nets, skipped, err := conflist.Discover(o.ConfDir)
			for _, e := range skipped {
				log.Warn("skipped a conflist", "error", e)
			}
			return nets, err
		}
		return conflist.Load(paths, o.NetName, o.DataDir)
	}
}

// resolveConflists replaces conflist.Auto with the primary's conflist in
// confDir, as it is now.
func resolveConflists(paths []string, confDir string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if p == conflist.Auto {
			primary, err := conflist.Primary(confDir)
			if err != nil {
				return nil, err
			}
			p = primary
		}
		out = append(out, p)
	}
	return out, nil
}

// ensureEntries puts the rdma-chain entry back into each conflist that
// lost it (a primary's agent rewrote the file on restart), logs and counts
// it. A conflist whose agent keeps rewriting it without the entry gets it
// back only as backoff allows, each longer wait logged and counted. A
// conflist it cannot read or fix is logged; loading it then says what is
// wrong.
func ensureEntries(paths []string, o Options, m *metrics.Reconcile, backoff *restoreBackoff, log *slog.Logger) {
	for _, p := range paths {
		if !backoff.allowed(p) {
			continue // a check is due on its own once the wait is over
		}
		restored, err := install.EnsureEntry(p, o.After, o.Set)
		switch {
		case err != nil:
			log.Error("cannot put the rdma-chain entry back", "conflist", p, "error", err)
		case restored:
			m.ConflistRestores.Inc()
			log.Info("put the rdma-chain entry back: another agent had rewritten the conflist without it", "conflist", p)
			if wait := backoff.restored(p); wait > 0 {
				m.ConflistRestoreBackoffs.Inc()
				log.Warn("another agent keeps rewriting the conflist without the rdma-chain entry: the next restore waits",
					"conflist", p, "wait", wait)
			}
		}
	}
}

// serveMetrics starts following the outcome logs (what they hold now is
// never counted) and serves /metrics.
func (r *reconciler) serveMetrics(ctx context.Context, mo metrics.Options) error {
	tail := metrics.NewOutcomeTail()
	tail.Poll(r.networks())
	node := metrics.NewNodeCollector(metrics.NewKernelStats(), r.networks, tail, mo.PodLabels)
	reg, err := metrics.NewRegistry(r.version, r.metrics, node)
	if err != nil {
		return err
	}
	if err := reg.Register(metrics.NewUsageCollector(rdmares.NewKernel(), r.networks, mo.PodLabels)); err != nil {
		return err
	}
	healthy := func() error { return r.cri.healthy(r.criSocket, time.Now()) }
	return metrics.Serve(ctx, mo.Addr, reg, healthy, r.log)
}

func (r *reconciler) networks() []conflist.Network {
	r.netsMu.Lock()
	defer r.netsMu.Unlock()
	return r.nets
}

func (r *reconciler) setNetworks(nets []conflist.Network) {
	r.netsMu.Lock()
	defer r.netsMu.Unlock()
	r.nets = nets
}

// loop runs a pass every interval until ctx ends (SIGTERM), a repair on
// every kernel event in between, and a reload (which puts a lost entry
// back) on every change to the conf dir. Before each pass it holds the
// SMC socket hooks the entries use (the daemon only: a one-off pass, as
// uninstall's, holds nothing); before the first, it releases the
// attachments of pods that died in a reboot.
func (r *reconciler) loop(ctx context.Context, interval time.Duration, confChanged <-chan struct{}) {
	sink := eventSink{ch: make(chan time.Time, 1), r: r}
	r.node.Watch(ctx, sink)
	go r.waitEvents(ctx, sink.ch)
	next := time.NewTimer(0)
	defer next.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-confChanged:
			r.reloadNetworks()
		case <-next.C:
			r.reloadNetworks()
			if first {
				r.releaseEarlierBoot()
				first = false
			}
			if r.holdSMCHook {
				r.holdHooks()
			}
			_ = r.passErr(ctx)
			next.Reset(interval)
		}
	}
}

// reloadNetworks reads the networks again (a conflist may have been
// rewritten), keeping the last good ones when it cannot. The same failure
// again (an agent that keeps writing the file while the entry's restore
// backs off) is said once, until a read succeeds or fails otherwise.
func (r *reconciler) reloadNetworks() {
	if r.reload == nil {
		return
	}
	err := r.reload()
	switch {
	case err == nil:
		r.reloadErr = ""
	case err.Error() != r.reloadErr:
		r.reloadErr = err.Error()
		r.log.Warn("cannot read the configuration: using the one read before (said once while it lasts)", "error", err)
	default:
		r.log.Debug("cannot read the configuration: using the one read before", "error", err)
	}
}

// passErr runs one pass and returns ErrProblems when it found any.
func (r *reconciler) passErr(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.pass(ctx)
	r.metrics.Problems.Set(float64(n))
	if n > 0 {
		return ErrProblems
	}
	return nil
}

// podArgs are CNI_ARGS for the record's pod, for the IPAM plugin.
func podArgs(p state.Pod) string {
	for _, v := range []string{p.Namespace, p.Name, p.UID} {
		if strings.ContainsAny(v, ";=") {
			return "IgnoreUnknown=1"
		}
	}
	args := []string{"IgnoreUnknown=1"}
	for _, kv := range [][2]string{{"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name}, {"K8S_POD_UID", p.UID}} {
		if kv[1] != "" {
			args = append(args, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(args, ";")
}
