package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/ops/cri"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const criTimeout = 10 * time.Second

// errNoEntry: a conflist without an rdma-chain entry.
var errNoEntry = errors.New("no rdma-chain entry")

// network is one CNI network whose attachments reconcile looks after: the
// rdma-chain entry as the runtime would pass it to the plugin.
type network struct {
	name    string
	dataDir string
	stdin   []byte
	path    string // the conflist it comes from ("" with --net-name)
}

// node is the reconciler's seam over the node it runs on: the runtime that
// lists the pod sandboxes, the plugin's DEL, the kernel's netns and
// devices, the clock.
type node interface {
	Sandboxes(ctx context.Context, criSocket string) ([]cri.Sandbox, error)
	NetnsGone(path string) (bool, error)
	Del(args *skel.CmdArgs) error
	Now() time.Time
	// Stranded says why rec is an exclusive-mode attachment whose pod
	// netns died and whose device the kernel refunded ("" if it is not).
	Stranded(rec *state.Record) (string, error)
	// Watch starts the kernel's event sources, which fire into sink until
	// ctx ends; a node without any starts none (the interval only).
	Watch(ctx context.Context, sink eventSink)
}

// reconciler releases the attachments of pods that are gone.
type reconciler struct {
	nets      []network
	criSocket string
	version   string
	cniPath   string
	minAge    time.Duration
	out       io.Writer
	reload    func() error // nil: the networks never change
	metrics   *reconcileMetrics
	// mu serialises passes and repairs; netsMu guards nets, which reload
	// replaces while the metrics handler reads them.
	mu, netsMu sync.Mutex
	node       node
}

func runReconcile(o IO, args []string) int {
	fs := newFlags(o, "reconcile")
	var conflists stringList
	fs.Var(&conflists, "conflist", "a conflist whose rdma-chain entry (name, dataDir, ipam) to reconcile; repeatable (default: every conflist of --cni-conf-dir with one)")
	confDir := fs.String("cni-conf-dir", defaultConfDir(), "the runtime's conflist directory, searched without --conflist or --net-name (default $NETCONFPATH, else /etc/cni/net.d)")
	netName := fs.String("net-name", "", "network name of the records to reconcile, without a conflist (with --data-dir)")
	dataDir := fs.String("data-dir", config.DefaultDataDir, "state directory, with --net-name")
	r := &reconciler{out: o.Stdout, metrics: newReconcileMetrics(), version: o.Version}
	fs.StringVar(&r.criSocket, "cri-socket", "", "the runtime's CRI socket, e.g. /run/containerd/containerd.sock; without it a pod is gone when its netns is")
	fs.StringVar(&r.cniPath, "cni-bin-dir", "/opt/cni/bin", "CNI_PATH for the IPAM plugin that releases leases")
	fs.DurationVar(&r.minAge, "min-age", time.Minute, "with --cri-socket, leave attachments younger than this (their pod may still be starting)")
	once := fs.Bool("once", false, "one pass, then exit (the default without --interval)")
	interval := fs.Duration("interval", 0, "run a pass every interval until SIGTERM, and repair on kernel events between passes")
	var mo metricsOptions
	fs.StringVar(&mo.addr, "metrics-bind-address", "", "with --interval, serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9742); empty: none")
	fs.BoolVar(&mo.podLabels, "metrics-pod-labels", false, "label per-pod series with the pod's namespace and name (one series set per pod)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(fs, "unexpected argument %q", pos[0])
	case *once && *interval != 0:
		return usageError(fs, "--once and --interval exclude each other")
	case *interval < 0:
		return usageError(fs, "--interval must be positive")
	case mo.addr != "" && *interval == 0:
		return usageError(fs, "--metrics-bind-address needs --interval")
	}
	load := func() ([]network, error) {
		if len(conflists) == 0 && *netName == "" {
			nets, skipped, err := discoverNetworks(*confDir)
			for _, e := range skipped {
				say(o.Stdout, "reconcile: skipped %v\n", e)
			}
			return nets, err
		}
		return loadNetworks(conflists, *netName, *dataDir)
	}
	nets, err := load()
	if err != nil {
		say(o.Stderr, Binary+" reconcile: %v\n", err)
		return ExitProblems
	}
	r.nets = nets
	r.useKernel(o)
	if *interval == 0 {
		return r.passCode(context.Background())
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if mo.addr != "" {
		if err := r.serveMetrics(ctx, mo); err != nil {
			say(o.Stderr, Binary+" reconcile: %v\n", err)
			return ExitProblems
		}
	}
	return r.loop(ctx, *interval)
}

func (r *reconciler) useKernel(o IO) {
	env := chain.KernelEnv()
	env.Stderr = o.Stderr
	r.node = kernelNode{env: env, plugin: chain.New(env)}
}

// kernelNode is the node the command runs on: CRI at the socket, the
// plugin's own DEL, the kernel.
type kernelNode struct {
	env    chain.Env
	plugin *chain.Plugin
}

func (kernelNode) Sandboxes(ctx context.Context, criSocket string) ([]cri.Sandbox, error) {
	return cri.List(ctx, criSocket)
}

func (kernelNode) NetnsGone(path string) (bool, error) { return netnsid.Gone(path) }

func (k kernelNode) Del(args *skel.CmdArgs) error { return k.plugin.Del(args) }

func (kernelNode) Now() time.Time { return time.Now() }

// serveMetrics starts following the outcome logs (what they hold now is
// never counted) and serves /metrics.
func (r *reconciler) serveMetrics(ctx context.Context, mo metricsOptions) error {
	tail := newOutcomeTail()
	tail.poll(r.networks())
	node := newNodeCollector(newKernelReader(), r.networks, tail, mo.podLabels)
	reg, err := r.newRegistry(r.version, node)
	if err != nil {
		return err
	}
	return serveMetrics(ctx, mo.addr, reg, func(f string, a ...any) { say(r.out, f+"\n", a...) })
}

func (r *reconciler) networks() []network {
	r.netsMu.Lock()
	defer r.netsMu.Unlock()
	return r.nets
}

func (r *reconciler) setNetworks(nets []network) {
	r.netsMu.Lock()
	defer r.netsMu.Unlock()
	r.nets = nets
}

// loop runs a pass every interval until ctx ends (SIGTERM), and a repair
// on every kernel event in between.
func (r *reconciler) loop(ctx context.Context, interval time.Duration) int {
	sink := eventSink{ch: make(chan time.Time, 1), r: r}
	r.node.Watch(ctx, sink)
	go r.waitEvents(ctx, sink.ch)
	for {
		if r.reload != nil {
			if err := r.reload(); err != nil {
				say(r.out, "reconcile: %v: using the configuration read before\n", err)
			}
		}
		r.passCode(ctx)
		select {
		case <-ctx.Done():
			return ExitOK
		case <-time.After(interval):
		}
	}
}

func (r *reconciler) passCode(ctx context.Context) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.pass(ctx); n > 0 {
		return ExitProblems
	}
	return ExitOK
}

// loadNetworks builds the plugin confs to release attachments with.
func loadNetworks(conflists []string, netName, dataDir string) ([]network, error) {
	var nets []network
	for _, path := range conflists {
		n, err := networkFromConflist(path)
		if err != nil {
			return nil, err
		}
		nets = append(nets, n)
	}
	if netName != "" {
		stdin := fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":%s,"type":"rdma-chain","dataDir":%s}`, quote(netName), quote(dataDir))
		if _, _, err := config.Parse(stdin); err != nil {
			return nil, fmt.Errorf("--net-name %q --data-dir %q: %w", netName, dataDir, err)
		}
		nets = append(nets, network{name: netName, dataDir: dataDir, stdin: stdin})
	}
	return nets, nil
}

func networkFromConflist(path string) (network, error) {
	data, _, err := readNoFollow(path)
	if err != nil {
		return network{}, err
	}
	stdin, err := entryStdin(data)
	if err != nil {
		return network{}, fmt.Errorf("%s: %w", path, err)
	}
	conf, _, err := config.Parse(stdin)
	if err != nil {
		return network{}, fmt.Errorf("%s: rdma-chain entry: %w", path, err)
	}
	return network{name: conf.Name, dataDir: conf.DataDir, stdin: stdin, path: path}, nil
}

// entryStdin is the conflist's rdma-chain entry with the conflist's name and
// cniVersion, as a runtime passes it.
func entryStdin(data []byte) ([]byte, error) {
	top, plugins, err := conflistPlugins(data)
	if err != nil {
		return nil, err
	}
	at := entryIndex(plugins)
	if at < 0 {
		return nil, errNoEntry
	}
	e := plugins.elems[at]
	members := [][2][]byte{}
	for _, k := range []string{"cniVersion", "name"} {
		if n, _ := top.get(k); n != nil {
			members = append(members, [2][]byte{quote(k), data[n.off:n.end]})
		}
	}
	for _, m := range e.members {
		if m.key != "cniVersion" && m.key != "name" {
			members = append(members, [2][]byte{quote(m.key), data[m.val.off:m.val.end]})
		}
	}
	return renderObject(members), nil
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
