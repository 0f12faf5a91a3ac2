package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/ops/cri"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const criTimeout = 10 * time.Second

// network is one CNI network whose attachments reconcile looks after: the
// rdma-chain entry as the runtime would pass it to the plugin.
type network struct {
	name    string
	dataDir string
	stdin   []byte
}

// reconciler releases the attachments of pods that are gone.
type reconciler struct {
	nets      []network
	criSocket string
	cniPath   string
	minAge    time.Duration
	out       io.Writer
	reload    func() error // nil: the networks never change
	// seams for tests
	listSandboxes func(ctx context.Context, socket string) ([]cri.Sandbox, error)
	netnsGone     func(path string) (bool, error)
	del           func(args *skel.CmdArgs) error
	now           func() time.Time
}

func runReconcile(o IO, args []string) int {
	fs := newFlags(o, "reconcile")
	var conflists stringList
	fs.Var(&conflists, "conflist", "a conflist whose rdma-chain entry (name, dataDir, ipam) to reconcile; repeatable")
	netName := fs.String("net-name", "", "network name of the records to reconcile, without a conflist (with --data-dir)")
	dataDir := fs.String("data-dir", config.DefaultDataDir, "state directory, with --net-name")
	r := &reconciler{out: o.Stdout}
	fs.StringVar(&r.criSocket, "cri-socket", "", "the runtime's CRI socket, e.g. /run/containerd/containerd.sock; without it a pod is gone when its netns is")
	fs.StringVar(&r.cniPath, "cni-bin-dir", "/opt/cni/bin", "CNI_PATH for the IPAM plugin that releases leases")
	fs.DurationVar(&r.minAge, "min-age", time.Minute, "with --cri-socket, leave attachments younger than this (their pod may still be starting)")
	once := fs.Bool("once", false, "one pass, then exit (the default without --interval)")
	interval := fs.Duration("interval", 0, "run a pass every interval until SIGTERM")
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
	case len(conflists) == 0 && *netName == "":
		return usageError(fs, "give --conflist FILE or --net-name NAME")
	}
	nets, err := loadNetworks(conflists, *netName, *dataDir)
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
		nets, err := loadNetworks(conflists, *netName, *dataDir)
		if err == nil {
			r.nets = nets
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return r.loop(ctx, *interval)
}

func (r *reconciler) useKernel(o IO) {
	env := chain.KernelEnv()
	env.Stderr = o.Stderr
	r.del = chain.New(env).Del
	r.listSandboxes = cri.List
	r.netnsGone = netnsGone
	r.now = time.Now
}

// loop runs a pass every interval until ctx ends (SIGTERM).
func (r *reconciler) loop(ctx context.Context, interval time.Duration) int {
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
	return network{name: conf.Name, dataDir: conf.DataDir, stdin: stdin}, nil
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
		return nil, errors.New("no rdma-chain entry")
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

// netnsGone reports whether the netns path no longer holds a netns. A
// path left as a plain file counts as gone, as it does for DEL.
func netnsGone(path string) (bool, error) {
	err := ns.IsNSorErr(path)
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &notExist), errors.As(err, &notNS):
		return true, nil
	}
	return false, err
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
