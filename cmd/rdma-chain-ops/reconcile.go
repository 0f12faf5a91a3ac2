package main

import (
	"context"
	"errors"
	"os/signal"
	"syscall"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/reconcile"
)

func runReconcile(o IO, args []string) int {
	fs := newFlags(o, "reconcile")
	opt := reconcile.Options{Version: o.Version, Stderr: o.Stderr}
	var conflists stringList
	fs.Var(&conflists, "conflist", "a conflist whose rdma-chain entry (name, dataDir, ipam) to reconcile; auto: the primary's in --cni-conf-dir; repeatable (default: every conflist of --cni-conf-dir with one)")
	fs.BoolVar(&opt.EnsureEntry, "ensure-entry", false, "before each pass, put the rdma-chain entry back into each --conflist that lost it (an agent rewrote the file), with --set and --after")
	set := fs.String("set", "", `with --ensure-entry, the entry's keys as a JSON object, as install --set`)
	nodeAddrs := fs.String("node-addresses", "", "with --ensure-entry, as install --node-addresses")
	fs.StringVar(&opt.After, "after", "", "with --ensure-entry, place the entry after the last plugin of this type")
	fs.StringVar(&opt.ConfDir, "cni-conf-dir", conflist.DefaultConfDir(), "the runtime's conflist directory, searched without --conflist or --net-name (default $NETCONFPATH, else /etc/cni/net.d)")
	fs.StringVar(&opt.NetName, "net-name", "", "network name of the records to reconcile, without a conflist (with --data-dir)")
	fs.StringVar(&opt.DataDir, "data-dir", config.DefaultDataDir, "state directory, with --net-name")
	fs.StringVar(&opt.CRISocket, "cri-socket", "", "the runtime's CRI socket, e.g. /run/containerd/containerd.sock; without it a pod is gone when its netns is")
	fs.StringVar(&opt.CNIPath, "cni-bin-dir", "/opt/cni/bin", "CNI_PATH for the IPAM plugin that releases leases")
	fs.StringVar(&opt.IPAMDirsUnder, "ipam-dirs-under", "", "the node's directory this process sees IPAM leases in (the DaemonSet's /var/lib/cni mount): a network whose host-local keeps them elsewhere is a problem of every pass")
	fs.DurationVar(&opt.MinAge, "min-age", time.Minute, "with --cri-socket, leave attachments younger than this (their pod may still be starting)")
	once := fs.Bool("once", false, "one pass, then exit (the default without --interval)")
	fs.DurationVar(&opt.Interval, "interval", 0, "run a pass every interval until SIGTERM, and repair on kernel events between passes")
	fs.StringVar(&opt.Metrics.Addr, "metrics-bind-address", "", "with --interval, serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9742); empty: none")
	fs.DurationVar(&opt.LivenessGrace, "liveness-grace", 2*time.Minute, "with --metrics-bind-address, GET /healthz answers 503 once CRI (--cri-socket) has been unreachable this long")
	fs.BoolVar(&opt.HoldSMCHook, "hold-smc-hook", true, "with --interval, keep the SMC socket hook's BPF program attached between SMC-R pods wherever an entry's smcr.transparent uses it on this kernel, so that no pod's ADD loads it; false: the first SMC-R pod loads it and the last detaches it")
	fs.BoolVar(&opt.Metrics.PodLabels, "metrics-pod-labels", false, "label per-pod series with the pod's namespace and name (one series set per pod)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(fs, "unexpected argument %q", pos[0])
	case *once && opt.Interval != 0:
		return usageError(fs, "--once and --interval exclude each other")
	case opt.Interval < 0:
		return usageError(fs, "--interval must be positive")
	case opt.Metrics.Addr != "" && opt.Interval == 0:
		return usageError(fs, "--metrics-bind-address needs --interval")
	case opt.EnsureEntry && len(conflists) == 0:
		return usageError(fs, "--ensure-entry needs --conflist")
	case !opt.EnsureEntry && (*set != "" || opt.After != "" || *nodeAddrs != ""):
		return usageError(fs, "--set, --node-addresses and --after go with --ensure-entry")
	}
	var err error
	if opt.Set, err = withNodeAddresses(*set, *nodeAddrs); err != nil {
		return usageError(fs, "%v", err)
	}
	opt.Conflists = conflists
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = reconcile.Run(ctx, opt, o.Stdout)
	switch {
	case errors.Is(err, reconcile.ErrProblems):
		return ExitProblems
	case err != nil:
		say.Printf(o.Stderr, Binary+" reconcile: %v\n", err)
		return ExitProblems
	}
	return ExitOK
}
