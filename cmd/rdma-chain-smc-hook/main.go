// Command rdma-chain-smc-hook loads the transparent-SMC BPF socket hook
// (pkg/smc/hook), lists and unlists pod netns in it, and detaches it with
// the last one. The rdma-chain plugin runs it from its own directory
// (pkg/smc/hookcmd) for SMC-R pods only, so that the plugin binary, started
// for every pod, does not link cilium/ebpf; the reconcile daemon runs it to
// hold the program loaded between pods, and uninstall to release it.
//
//	rdma-chain-smc-hook supported|state|hold|release DIR
//	rdma-chain-smc-hook add|remove|listed DIR INODE
//
// DIR is the bpffs directory of the pins. Exit status 0 on success, 1 with
// the error on stderr, 2 for a usage error.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hook"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = "usage: rdma-chain-smc-hook supported|state|hold|release DIR | add|remove|listed DIR INODE"

func run(args []string, stdout, stderr io.Writer) int {
	verb, h, ino, err := parseArgs(args)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%v\n%s\n", err, usage)
		return 2
	}
	switch verb {
	case hookcmd.VerbSupported:
		err = h.Supported()
	case hookcmd.VerbAdd:
		err = h.Add(ino)
	case hookcmd.VerbRemove:
		err = h.Remove(ino)
	case hookcmd.VerbListed:
		var listed bool
		if listed, err = h.Listed(ino); err == nil {
			_, err = io.WriteString(stdout, hookcmd.FormatListed(listed))
		}
	case hookcmd.VerbState:
		var st hookmap.Status
		if st, err = h.State(); err == nil {
			_, err = io.WriteString(stdout, hookcmd.FormatState(st))
		}
	case hookcmd.VerbHold:
		err = h.Hold()
	case hookcmd.VerbRelease:
		err = h.Release()
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func parseArgs(args []string) (string, hook.Hook, uint32, error) {
	if len(args) < 2 {
		return "", hook.Hook{}, 0, fmt.Errorf("missing arguments")
	}
	verb, dir := args[0], args[1]
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", hook.Hook{}, 0, fmt.Errorf("DIR %q is not a clean absolute path", dir)
	}
	want := 3
	switch verb {
	case hookcmd.VerbSupported, hookcmd.VerbState, hookcmd.VerbHold, hookcmd.VerbRelease:
		want = 2
	case hookcmd.VerbAdd, hookcmd.VerbRemove, hookcmd.VerbListed:
	default:
		return "", hook.Hook{}, 0, fmt.Errorf("unknown verb %q", verb)
	}
	if len(args) != want {
		return "", hook.Hook{}, 0, fmt.Errorf("%s takes %d arguments, got %d", verb, want-1, len(args)-1)
	}
	var ino uint64
	if want == 3 {
		var err error
		if ino, err = strconv.ParseUint(args[2], 10, 32); err != nil || ino == 0 {
			return "", hook.Hook{}, 0, fmt.Errorf("INODE %q is not a netns inode number", args[2])
		}
	}
	return verb, hook.Hook{Dir: dir}, uint32(ino), nil
}
