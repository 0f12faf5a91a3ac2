package chain

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/pkg/addr"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// RDMA is the seam over the node's RDMA subsystem.
type RDMA interface {
	NetnsMode() (rdma.Mode, error)
	Devices() ([]rdma.Device, error)
	// CheckMovable fails with *rdma.UnsupportedMoveError, before anything
	// changes, for a device whose driver cannot change netns.
	CheckMovable(d rdma.Device) error
	MoveToNetns(dev string, nsFd int) error
	// ReturnToHost brings dev back from the netns at podNSPath to the
	// plugin's own netns; absent device or netns is not an error.
	ReturnToHost(dev, podNSPath string) error
	// InNetns reports whether dev is visible in the netns at nsPath.
	InNetns(dev, nsPath string) (bool, error)
	// FreeGIDs counts, up to want, the free rows of port's GID table of
	// dev, and returns the table's size.
	FreeGIDs(dev string, port, want int) (free, size int, err error)
}

// Links is the seam over netdevs: exclusive-mode moves, shared-mode children.
type Links interface {
	// NetnsLocal says why host netdev name cannot leave the host netns
	// (a bond, a bridge...), or "" when it can.
	NetnsLocal(name string) (string, error)
	// NodeUplinks maps the host netdevs that carry the node's own traffic
	// (netdev.NodeUplinks; nodeAddrs: the conf's nodeAddresses) to what
	// they carry.
	NodeUplinks(nodeAddrs []netip.Addr) (map[string]string, error)
	Describe(hostName, podName string) (state.HostLink, error)
	// MoveToPod moves the netdev Describe gave hl for into the pod.
	MoveToPod(hl state.HostLink, podNS ns.NetNS) error
	RestoreToHost(l state.HostLink, podNSPath string) error
	// AddChild's Child names a child it created even with an error (its
	// undo, DelChild, is then the caller's).
	AddChild(spec netdev.ChildSpec, podNS ns.NetNS) (netdev.Child, error)
	// DelChild is netdev.DelChild, by name in the netns at podNSPath: for a
	// child recorded without its nsid.
	DelChild(podNSPath, name, expectMAC string) error
	// DelChildByID is netdev.DelChildByID, from the plugin's netns (the
	// host's) through the pod netns's nsid there and the child's ifindex:
	// an error wrapping netdev.ErrUnproven when it cannot prove the child
	// gone.
	DelChildByID(id netdev.ChildID, expectMAC string) error
	CheckInPod(podNSPath, name, mac string) error
}

// SoftRoCE is the seam over the soft-RoCE (rxe) devices podSoftRoCE makes,
// one per pod on the pod's own child.
type SoftRoCE interface {
	// Unsupported says why this kernel cannot serve an rxe device made in
	// a pod's netns, "" when it can.
	Unsupported() string
	// Add makes rxe device name on netdev, from inside the netns at nsPath.
	Add(nsPath, name, netdev string) error
	// Del deletes rxe device name; nil only once a listing shows it gone.
	Del(name string) error
	// NetdevPCI is the PCI function of a host netdev, "" when none.
	NetdevPCI(netdev string) string
}

// PodResources is the seam over kubelet's pod-resources API at the socket
// the conf names: a pod's device-plugin allocations and DRA claim devices.
// Serving checks that a server accepts connections there without making
// a call (podres.Client.Serving).
type PodResources interface {
	Lookup(ctx context.Context, socket, namespace, name string, q podres.Query) (*podres.Pod, error)
	Probe(ctx context.Context, socket string) error
	Serving(ctx context.Context, socket string) error
}

// Addressing is the seam over in-pod address configuration.
type Addressing interface {
	Configure(podNS ns.NetNS, ifName string, res *types100.Result, opts addr.Options) error
	HostRouteWarning(parent string, ips []*types100.IPConfig) string
	// Prefixes lists the global IPv6 addresses (with prefix lengths) of a
	// host netdev.
	Prefixes(netdev string) ([]netip.Prefix, error)
}

// SMC is the seam over the kernel's SMC-R tables. An empty nsPath means the
// plugin's own netns (init_net on a node).
type SMC interface {
	EnsurePnet(nsPath string, e smc.PnetEntry) (smc.PnetEntry, error)
	RemovePnet(nsPath string, e smc.PnetEntry) error
	PnetEntries(nsPath string) ([]smc.PnetEntry, error)
	EnsureUEID(ueid string) error
	TCP2SMC(nsPath string) (bool, error)
	// The socket hook (pins under dir) that turns the TCP sockets of the
	// listed netns (by inode) into SMC sockets. HookAdd's loaded: the
	// program was loaded and attached for this netns (nothing was pinned).
	HookSupported(dir string) error
	HookAdd(dir string, netnsIno uint64) (loaded bool, err error)
	HookRemove(dir string, netnsIno uint64) error
	HookListed(dir string, netnsIno uint64) (bool, error)
	// Offer is smc.Detect with the socket hook's pins under dir.
	Offer(dir string) smc.Offer
}

// Netns is the seam over network namespaces by path.
type Netns interface {
	Open(path string) (ns.NetNS, error)
	// ID is netnsid.Of: the netns's inode and never-reused cookie, an
	// error wrapping netnsid.ErrGone when path names no netns any more.
	ID(path string) (netnsid.ID, error)
	// Own reports whether path is the netns the plugin runs in.
	Own(path string) (bool, error)
}

// Env holds the plugin's seams and I/O.
type Env struct {
	RDMA         RDMA
	Links        Links
	IPAM         addr.IPAM
	Addrs        Addressing
	SMC          SMC
	PodResources PodResources
	Netns        Netns
	SoftRoCE     SoftRoCE
	// LockTimeout bounds the wait for the node lock; 0 means
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// BootIDPath is the file the kernel's boot id is read from
	// (state.ReadBootID); "" means state.BootIDFile.
	BootIDPath string
	Stdout     io.Writer
	Stderr     io.Writer
}

// Plugin serves the CNI verbs.
type Plugin struct {
	env Env
}

// New returns a plugin over env.
func New(env Env) *Plugin { return &Plugin{env: env} }

// call is one verb's parsed input.
type call struct {
	conf  *config.NetConf
	pod   config.Pod
	args  *skel.CmdArgs
	log   *slog.Logger
	store *state.Store
	// ipamStdin is the conf the delegated IPAM gets.
	ipamStdin []byte
	// sweep removes the temporary files of killed writers, once per call
	// at most, under the node lock (lock and lockedRecord call it).
	sweep func()
	// lockTimeout bounds each wait for the node lock.
	lockTimeout time.Duration
	// podConf is what the pod's claims configure (ADD; zero: the conf).
	podConf podConf
	// boot is the kernel's boot id once bootRead (bootID reads it once).
	boot     string
	bootRead bool
}

func (c *call) key() state.Key {
	return state.Key{Network: c.conf.Name, ContainerID: c.args.ContainerID, IfName: c.args.IfName}
}

// Add is CNI ADD.
func (p *Plugin) Add(args *skel.CmdArgs) error { return p.serve("ADD", args, p.add) }

// Del is CNI DEL.
func (p *Plugin) Del(args *skel.CmdArgs) error { return p.serve("DEL", args, p.del) }

// Check is CNI CHECK.
func (p *Plugin) Check(args *skel.CmdArgs) error { return p.serve("CHECK", args, p.check) }

// GC is CNI GC.
func (p *Plugin) GC(args *skel.CmdArgs) error { return p.serve("GC", args, p.gc) }

// Status is CNI STATUS.
func (p *Plugin) Status(args *skel.CmdArgs) error { return p.serve("STATUS", args, p.status) }

// refuseOwnNetns fails a verb whose CNI_NETNS is the plugin's own netns (the
// host's) before anything happens: the plugin would treat the host as a pod.
// The CNI library checks this too, but only after the verb has run.
func (p *Plugin) refuseOwnNetns(verb, path string) error {
	if path == "" || verb == "STATUS" || verb == "GC" {
		return nil
	}
	own, err := p.env.Netns.Own(path)
	if err != nil {
		return cniError(types.ErrInvalidNetNS, "cannot compare CNI_NETNS "+path+" with the plugin's netns", err)
	}
	if own {
		return cniErrorf(types.ErrInvalidNetNS, "CNI_NETNS %s is the plugin's own netns, not a pod's", path)
	}
	return nil
}

// serve parses the input, runs fn and, whatever happened, logs one line
// for the verb and keeps its outcome. The call's logger carries the verb,
// the container and, once CNI_ARGS named it, the pod.
func (p *Plugin) serve(verb string, args *skel.CmdArgs, fn func(*call) error) (err error) {
	start := time.Now()
	conf, warnings, parseErr := parseConf(verb, args.StdinData)
	log, closeLog := newLogger(conf, p.env.Stderr)
	defer closeLog()
	c := &call{conf: conf, args: args, log: callLogger(log, verb, args), sweep: func() {},
		lockTimeout: cmp.Or(p.env.LockTimeout, DefaultLockTimeout)}
	defer func() {
		logOutcome(c, time.Since(start), err)
		if verb != "STATUS" || err != nil { // STATUS comes every few seconds
			recordOutcome(verb, c, err)
		}
	}()
	if parseErr != nil {
		return parseErr
	}
	if err := p.prepare(verb, c, warnings); err != nil {
		return err
	}
	return fn(c)
}

// parseConf parses the network configuration. DEL, GC and STATUS never
// read prevResult: a bad one the runtime resends on every retry must not
// make them fail forever.
func parseConf(verb string, stdin []byte) (*config.NetConf, []string, error) {
	if verb == "DEL" || verb == "GC" || verb == "STATUS" {
		return config.ParseWithoutPrevResult(stdin)
	}
	return config.Parse(stdin)
}

// callLogger binds the verb and the container (when the verb has one) to
// every line of the call.
func callLogger(log *slog.Logger, verb string, args *skel.CmdArgs) *slog.Logger {
	log = log.With("verb", verb)
	if args.ContainerID != "" {
		log = log.With("container", args.ContainerID)
	}
	return log
}

// prepare completes c from the parsed conf: the pod from CNI_ARGS (bound
// to the logger, which then logs the conf's warnings), the netns check,
// the IPAM's conf and the state store.
// ADD leaves the sweep of killed writers' temporary files to DEL, GC and
// CHECK (one DEL follows every ADD): such a file harms no later write, and
// reading the state directory on every ADD costs time with every record
// on the node (docs/performance.md).
func (p *Plugin) prepare(verb string, c *call, warnings []string) error {
	pod, err := config.ParseArgs(c.args.Args)
	c.pod = pod
	c.log = c.log.With("pod", pod.String())
	for _, w := range warnings {
		c.log.Warn(w)
	}
	if err != nil {
		if verb == "ADD" {
			return err
		}
		c.log.Warn("CNI_ARGS ignored", "error", err)
	}
	if err := p.refuseOwnNetns(verb, c.args.Netns); err != nil {
		return err
	}
	if c.conf.HasIPAM() {
		// The IPAM gets only the keys the plugin itself used.
		if c.ipamStdin, err = c.conf.IPAMStdin(); err != nil {
			return cniError(types.ErrInvalidNetworkConfig, "cannot build the IPAM plugin's configuration", err)
		}
	}
	c.store = state.New(c.conf.DataDir)
	if verb != "ADD" {
		c.sweep = sync.OnceFunc(func() { sweepTemporary(c.store, c.log) })
	}
	return nil
}
