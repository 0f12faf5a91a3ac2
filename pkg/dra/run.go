package dra

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/rdma-chain/rdma-chain/pkg/netdev"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// Config is how rdma-chain-dra runs.
type Config struct {
	NodeName   string
	Client     kubernetes.Interface
	SysRoot    string        // sysfs mount point [/sys]
	CDIDir     string        // where CDI specs go [/var/run/cdi]
	KubeletDir string        // kubelet's root [/var/lib/kubelet]
	CNIDataDir string        // the CNI plugin's dataDir, read for held devices
	CNIConfDir string        // the runtime's conflists: the entries' devices lists
	Interval   time.Duration // how often the node's devices are read again
	// StatusInterval is how often the plugin's records are looked at for
	// claim status to write; 0 writes none.
	StatusInterval time.Duration
	// SoftRoCEPods is how many pods may share a soft-RoCE NIC at once (its
	// capacity pods); 0 is DefaultSoftRoCEPods.
	SoftRoCEPods  int
	Log           *slog.Logger
	OnFatalCancel context.CancelCauseFunc
}

// Run registers the driver with kubelet, publishes the node's ResourceSlice
// and keeps it current until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	sys := rdma.New()
	if cfg.SysRoot != "" {
		sys.SysRoot = cfg.SysRoot
	}
	store := state.New(cfg.CNIDataDir)
	disc := &Discoverer{System: sys, SysRoot: cfg.SysRoot, Records: store.List,
		Offer: func() Offer { return OfferOfConfDir(cfg.CNIConfDir) }, OfferGrace: offerGrace,
		Uplinks: netdev.NodeUplinks, SoftRoCEPods: cfg.SoftRoCEPods, Log: cfg.Log}
	node, err := disc.Discover()
	if err != nil {
		return err
	}
	drv := &Driver{NodeName: cfg.NodeName, SysRoot: cfg.SysRoot, CDIDir: cfg.CDIDir, Log: cfg.Log,
		OnFatal: func(err error) { cfg.OnFatalCancel(err) }}
	drv.SetNode(node)
	// The helper listens in its data directory but does not make it; kubelet
	// makes only plugins/ itself.
	dataDir := filepath.Join(cfg.KubeletDir, "plugins", DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("the kubelet plugin's directory: %w", err)
	}
	helper, err := kubeletplugin.Start(ctx, drv,
		kubeletplugin.DriverName(DriverName), kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(cfg.KubeletDir, "plugins_registry")))
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if cfg.StatusInterval > 0 {
		defer startStatusWriter(ctx, cfg, store, drv)()
	}
	health, stopEvents := startNodeEvents(ctx, cfg.Client, cfg.NodeName, store.List, cfg.Log)
	defer stopEvents()
	published, err := publish(ctx, helper, cfg, node, nil, triggerStart)
	if err != nil {
		return err
	}
	health.report(nil, published, node.Skipped)
	events := make(chan struct{}, 1)
	watchNode(ctx, cfg.Log, func() {
		select {
		case events <- struct{}{}:
		default:
		}
	})
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		trigger, ok := nextRead(ctx, t.C, events, time.After)
		if !ok {
			return nil
		}
		n, err := disc.Discover()
		if err != nil {
			cfg.Log.Warn("cannot read the node's RDMA devices: the slice stays as published", "error", err)
			continue
		}
		drv.SetNode(n)
		before := published
		if published, err = publish(ctx, helper, cfg, n, published, trigger); err != nil {
			return err
		}
		health.report(before, published, n.Skipped)
	}
}

// startStatusWriter runs the claim status writer until ctx ends or the
// returned stop is called, which waits for it. It shows drv's refused
// claim configurations too.
func startStatusWriter(ctx context.Context, cfg Config, store *state.Store, drv *Driver) (stop func()) {
	w := &StatusWriter{Client: cfg.Client, Pool: cfg.NodeName, Records: store.List, Log: cfg.Log,
		InvalidConfigs: drv.invalidConfigStatuses,
		Outcomes:       func() ([]outcome.Entry, error) { return outcome.Read(cfg.CNIDataDir) },
		Changed: AnyChanged(ModTimeChanged(store.AttachmentsDir(), time.Now),
			ModTimeChanged(filepath.Join(cfg.CNIDataDir, outcome.FileName), time.Now))}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx, cfg.StatusInterval) }()
	return func() { cancel(); <-done }
}

// offerGrace is how long the devices of the last rdma-chain entries read
// stay published while the conflists have none.
const offerGrace = 2 * time.Minute

// Why the node's devices were read before a publish.
const (
	triggerStart    = "start"
	triggerInterval = "interval"
	triggerEvent    = "event"
)

// eventSettle is how long a kernel event waits for the rest of its burst
// (a netns move, a bond's members, a port flapping) before the node is
// read once for all of it.
const eventSettle = 200 * time.Millisecond

// nextRead waits for the next reading of the node, on the interval's tick
// or on a kernel event, whose burst is let settle (after is time.After)
// and drained, and returns what started it. It returns false when ctx
// ends.
func nextRead(ctx context.Context, tick <-chan time.Time, events chan struct{}, after func(time.Duration) <-chan time.Time) (string, bool) {
	select {
	case <-ctx.Done():
		return "", false
	case <-tick:
		return triggerInterval, true
	case <-events:
	}
	select {
	case <-ctx.Done():
		return "", false
	case <-after(eventSettle):
	}
	select {
	case <-events:
	default:
	}
	return triggerEvent, true
}

// watchNode starts the kernel's event sources of this netns: rtnetlink
// link events (a NIC appears or changes state, as its port's does) and,
// where the kernel has it, the RDMA netlink monitor (an RDMA device
// registers, goes or changes netns). A source that cannot start is said
// once; the --interval reading remains.
func watchNode(ctx context.Context, log *slog.Logger, fire func()) {
	if err := netdev.WatchLinks(ctx, fire); err != nil {
		log.Warn("no link events: the node's devices are read every --interval only", "error", err)
	}
	if err := rdma.Monitor(ctx, fire); err != nil {
		log.Info("no RDMA netlink monitor: RDMA devices that come or go without a link event are seen at the next --interval", "error", err)
	}
}

// publish publishes node's devices when they differ from published, and
// returns what is published.
func publish(ctx context.Context, h *kubeletplugin.Helper, cfg Config, node *Node, published []resourceapi.Device, trigger string) ([]resourceapi.Device, error) {
	devs := Devices(node)
	if published != nil && reflect.DeepEqual(devs, published) {
		return published, nil
	}
	for name, why := range node.Skipped {
		cfg.Log.Warn("RDMA device not published", "device", name, "why", why)
	}
	if err := h.PublishResources(ctx, Resources(cfg.NodeName, devs)); err != nil {
		return nil, fmt.Errorf("publish the ResourceSlice: %w", err)
	}
	cfg.Log.Info("published the node's RDMA devices", "devices", len(devs), "mode", node.Mode, "trigger", trigger)
	return devs, nil
}

// Resources is what the driver publishes of a node: one pool named after
// the node, holding one ResourceSlice with devs.
func Resources(nodeName string, devs []resourceapi.Device) resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		nodeName: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}
}
