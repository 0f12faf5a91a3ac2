package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/install"
)

// Binary is the name of the operator binary, as its messages and usage say.
const Binary = install.OpsBinary

// Exit codes of every command.
const (
	ExitOK       = 0 // done, nothing wrong found
	ExitProblems = 1 // done or attempted, and problems were found
	ExitUsage    = 2 // the command line is wrong
)

// IO is where a command reads and writes.
type IO struct {
	Stdout, Stderr io.Writer
	// Version is the binary's, set by Main (reconcile's metrics show it).
	Version string
}

type command struct {
	name, args, summary string
	run                 func(io IO, args []string) int
}

func commands() []command {
	return []command{
		{"inspect", "[--netns PATH] [--json] [--data-dir DIR | --conflist FILE | --cni-conf-dir DIR]...", "show the node's RDMA devices, SMC-R tables, attachments and recent failures (read-only)", runInspect},
		{"validate", "FILE... [--cni-bin-dir DIR]", "check conflists strictly, one line per problem", runValidate},
		{"install", "[--binaries-from DIR --cni-bin-dir DIR] [--conflist FILE|auto [--cni-conf-dir DIR] [--wait D] [--after TYPE] [--set JSON] [--node-addresses LIST] [--dry-run]]", "install the plugin binaries and insert or update the rdma-chain entry of a conflist, atomically", runInstall},
		{"reconcile", "[--conflist FILE|auto [--ensure-entry [--set JSON] [--node-addresses LIST] [--after TYPE]] | --net-name N --data-dir DIR | --cni-conf-dir DIR] [--cri-socket PATH] [--once | --interval D [--hold-smc-hook=true|false] [--metrics-bind-address ADDR [--liveness-grace D]]]", "release attachments of pods that are gone (the GC runtimes behind Terway never send)", runReconcile},
		{"uninstall", "[--conflist FILE|auto [--cni-conf-dir DIR] [--wait D] [--force] [--cri-socket PATH]] [--cni-bin-dir DIR]", "drain the rdma-chain entry of a conflist, release what gone pods held, and once no pod holds an attachment take the entry, then the plugin binaries, out", runUninstall},
	}
}

// Main runs the operator command named by args[0] and returns the exit code.
func Main(args []string, version string, o IO) int {
	if len(args) == 0 {
		usage(o.Stderr, version)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(o.Stdout, version)
		return ExitOK
	case "--version", "version":
		say.Println(o.Stdout, Binary, version)
		return ExitOK
	}
	o.Version = version
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(o, args[1:])
		}
	}
	say.Printf(o.Stderr, "%s: unknown command %q\n\n", Binary, args[0])
	usage(o.Stderr, version)
	return ExitUsage
}

func usage(w io.Writer, version string) {
	say.Printf(w, "%s %s: the operator commands of rdma-chain, the chained CNI plugin that\n", Binary, version)
	say.Println(w, "gives Kubernetes pods RDMA (the plugin itself serves only the CNI verbs).")
	say.Println(w)
	for _, c := range commands() {
		say.Printf(w, "  %-10s %s\n", c.name, c.summary)
	}
	say.Printf(w, "\n%s COMMAND --help shows a command's options.\n", Binary)
	say.Println(w, "Exit codes: 0 ok, 1 problems found, 2 usage error.")
}

// newFlags returns a flag set for the command whose --help prints to
// stdout and whose errors print to stderr.
func newFlags(o IO, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	for _, c := range commands() {
		if c.name == name {
			fs.Usage = func() {
				say.Printf(fs.Output(), "usage: %s %s %s\n\n%s.\n\nOptions:\n", Binary, c.name, c.args, c.summary)
				fs.PrintDefaults()
			}
		}
	}
	return fs
}

// parseFlags parses args with flags and positional arguments in any order.
// It returns the positional arguments, or an exit code when the command
// must stop (--help: 0, a bad flag: 2).
func parseFlags(o IO, fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		err := parseHelp(o, fs, args)
		if errors.Is(err, flag.ErrHelp) {
			return nil, ExitOK, false
		}
		if err != nil {
			return nil, ExitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseHelp parses args, printing --help to stdout.
func parseHelp(o IO, fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(o.Stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	return fs.Parse(args)
}

// usageError prints msg and the command's usage to stderr.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	say.Printf(fs.Output(), "%s %s: %s\n", Binary, fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return ExitUsage
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

const nodeAddressesUsage = "the node's addresses, comma-separated (the DaemonSet passes the downward API's status.hostIPs): the entry's nodeAddresses, which exclusive mode never moves a netdev holding"

// withNodeAddresses adds to set (install's --set JSON object, "" for none)
// the entry key nodeAddresses from list: comma-separated IP addresses, as
// the downward API gives a pod status.hostIPs. An empty list leaves set as
// it is.
func withNodeAddresses(set, list string) ([]byte, error) {
	if list == "" {
		return []byte(set), nil
	}
	keys := map[string]json.RawMessage{}
	if set != "" {
		if err := json.Unmarshal([]byte(set), &keys); err != nil || keys == nil {
			return nil, fmt.Errorf("--set: not a JSON object: %q", set)
		}
	}
	var addrs []string
	for _, s := range strings.Split(list, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("--node-addresses: %q is not an IP address", s)
		}
		addrs = append(addrs, a.String())
	}
	raw, err := json.Marshal(addrs)
	if err != nil {
		return nil, err
	}
	keys["nodeAddresses"] = raw
	return json.Marshal(keys)
}
