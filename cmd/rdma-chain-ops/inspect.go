package main

import (
	"encoding/json"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/inspect"
)

func runInspect(o IO, args []string) int {
	fs := newFlags(o, "inspect")
	var opt inspect.Options
	fs.StringVar(&opt.Netns, "netns", "", "also show this netns: its interfaces, addresses, GIDs, pnet table, net.smc.* and SMC fallbacks")
	asJSON := fs.Bool("json", false, "print JSON for scripts instead of text")
	var dirs, conflists stringList
	fs.Var(&dirs, "data-dir", "state directory of a network (repeatable) (default "+config.DefaultDataDir+")")
	fs.Var(&conflists, "conflist", "read the state directory from this conflist's rdma-chain entry (repeatable)")
	fs.StringVar(&opt.ConfDir, "cni-conf-dir", conflist.DefaultConfDir(), "without --data-dir or --conflist, read the state directories of the rdma-chain entries of the conflists here (default $NETCONFPATH, else /etc/cni/net.d)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	opt.DataDirs, opt.Conflists = dirs, conflists
	r, err := inspect.Run(opt)
	if err != nil {
		say.Printf(o.Stderr, Binary+" inspect: %v\n", err)
		return ExitProblems
	}
	if *asJSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	} else {
		inspect.WriteText(o.Stdout, r)
	}
	if r.Problems() {
		return ExitProblems
	}
	return ExitOK
}
