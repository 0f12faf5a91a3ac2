package main

import (
	"context"
	"fmt"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/install"
	"github.com/rdma-chain/rdma-chain/pkg/reconcile"
)

func runInstall(o IO, args []string) int {
	fs := newFlags(o, "install")
	var opt install.Options
	fs.StringVar(&opt.Conflist, "conflist", "", "the conflist to change (a symlink is refused); auto: the primary's, the first *.conf, *.conflist or *.json of --cni-conf-dir, as runtimes choose it")
	fs.StringVar(&opt.ConfDir, "cni-conf-dir", conflist.DefaultConfDir(), "the runtime's conflist directory, for --conflist auto (default $NETCONFPATH, else /etc/cni/net.d)")
	fs.StringVar(&opt.After, "after", "", "place the entry after the last plugin of this type (default: keep its place, or append)")
	set := fs.String("set", "", `JSON object of entry keys to set, e.g. '{"mode":"shared"}'; a null value removes the key`)
	nodeAddrs := fs.String("node-addresses", "", nodeAddressesUsage)
	fs.BoolVar(&opt.DryRun, "dry-run", false, "print the resulting conflist instead of writing it")
	fs.StringVar(&opt.BinariesFrom, "binaries-from", "", "first copy "+strings.Join(install.PluginBinaries, " and ")+" from this directory (atomically, in that order)")
	fs.StringVar(&opt.BinDir, "cni-bin-dir", "", "the runtime's CNI bin dir the binaries go to (not a symlink)")
	fs.DurationVar(&opt.Wait, "wait", 0, "wait this long for --conflist to appear (the primary plugin writes it)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	var err error
	if opt.Set, err = withNodeAddresses(*set, *nodeAddrs); err != nil {
		return usageError(fs, "%v", err)
	}
	switch {
	case len(pos) > 0:
		return usageError(fs, "unexpected argument %q", pos[0])
	case (opt.BinariesFrom == "") != (opt.BinDir == ""):
		return usageError(fs, "--binaries-from and --cni-bin-dir go together")
	case opt.Conflist == "" && opt.BinariesFrom == "":
		return usageError(fs, "--conflist or --binaries-from is required")
	}
	if err := install.Run(opt, o.Stdout); err != nil {
		say.Printf(o.Stderr, Binary+" install: %v\n", err)
		return ExitProblems
	}
	return ExitOK
}

func runUninstall(o IO, args []string) int {
	fs := newFlags(o, "uninstall")
	var opt install.UninstallOptions
	fs.StringVar(&opt.Conflist, "conflist", "", "the conflist to take the rdma-chain entry out of (a symlink is refused); auto: the primary's in --cni-conf-dir")
	fs.StringVar(&opt.ConfDir, "cni-conf-dir", conflist.DefaultConfDir(), "the runtime's conflist directory, for --conflist auto (default $NETCONFPATH, else /etc/cni/net.d)")
	fs.StringVar(&opt.BinDir, "cni-bin-dir", "", "the runtime's CNI bin dir to remove "+strings.Join(install.PluginBinaries, " and ")+" from, after the entry")
	fs.DurationVar(&opt.Wait, "wait", 0, "with --conflist, wait this long for the pods that hold an attachment to go")
	fs.BoolVar(&opt.Force, "force", false, "with --conflist, take the entry and the binaries out although pods hold attachments (nothing gives those back)")
	hostRoot := fs.String("host-root", "", "the node's root as this process sees it (/host in a kubectl debug node pod): uninstall chroots into it first, so that every path (flags, the entry's dataDir, pod netns, the CRI socket, the IPAM plugin and its leases) is the node's")
	rc := reconcile.Options{Version: o.Version, Stderr: o.Stderr, CNIPath: "/opt/cni/bin"}
	fs.StringVar(&rc.CRISocket, "cri-socket", "", "the runtime's CRI socket: a pod is gone when CRI no longer lists its sandbox (default: when its netns is gone)")
	fs.DurationVar(&rc.MinAge, "min-age", time.Minute, "with --cri-socket, leave attachments younger than this (their pod may still be starting)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(fs, "unexpected argument %q", pos[0])
	case opt.Conflist == "" && opt.BinDir == "":
		return usageError(fs, "--conflist or --cni-bin-dir is required")
	case opt.Conflist == "" && (opt.Wait != 0 || opt.Force):
		return usageError(fs, "--wait and --force go with --conflist")
	}
	if *hostRoot != "" {
		if err := enterHostRoot(*hostRoot); err != nil {
			say.Printf(o.Stderr, Binary+" uninstall: %v\n", err)
			return ExitProblems
		}
	}
	if opt.BinDir != "" {
		rc.CNIPath = opt.BinDir
	}
	opt.Release = func(ctx context.Context, n conflist.Network) error {
		rc.Networks = []conflist.Network{n}
		return reconcile.Run(ctx, rc, o.Stdout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := install.Uninstall(ctx, opt, o.Stdout); err != nil {
		say.Printf(o.Stderr, Binary+" uninstall: %v\n", err)
		return ExitProblems
	}
	return ExitOK
}

// enterHostRoot makes dir this process's root. Uninstall in a debug pod
// reads the node's files through a host mount: without the chroot, the
// entry's dataDir (a node path) would name the image's empty directory,
// no attachment would be found, and the entry would go while pods still
// hold devices and leases.
func enterHostRoot(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("--host-root %q: not an absolute path", dir)
	}
	if err := unix.Chroot(dir); err != nil {
		return fmt.Errorf("--host-root %s: %w", dir, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("--host-root %s: chdir: %w", dir, err)
	}
	return nil
}
