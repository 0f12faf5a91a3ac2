// Command fakegpu is the cluster tier's test-only GPU DRA driver,
// gpu.example.com: a kubelet plugin that prepares every claim of its
// devices with no CDI device (it hands the container nothing) and
// unprepares it, so that a pod whose claim holds one of its GPUs beside an
// rdma-chain NIC starts, as with a real GPU driver. Its devices are the
// ResourceSlice the tier writes (integration/cluster/pods/gpu-nic.yaml):
// it publishes none itself. It runs on the node named by NODE_NAME, with
// the in-cluster API credentials of its pod (the plugin helper reads the
// claims kubelet names), until SIGTERM.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// driverName is the fake driver's name, its devices' driver in the slice.
const driverName = "gpu.example.com"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("fakegpu", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, driver{log: log},
		kubeletplugin.DriverName(driverName), kubeletplugin.NodeName(os.Getenv("NODE_NAME")), kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath("/var/lib/kubelet/plugins/"+driverName),
		kubeletplugin.RegistrarDirectoryPath("/var/lib/kubelet/plugins_registry"))
	if err != nil {
		return err
	}
	log.Info("plugin serving; kubelet registers it from its registration socket", "driver", driverName)
	<-ctx.Done()
	helper.Stop()
	return nil
}

// driver prepares and unprepares every claim, with nothing to do.
type driver struct{ log *slog.Logger }

func (d driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		d.log.Info("prepared claim", "claim", c.Namespace+"/"+c.Name)
		out[c.UID] = kubeletplugin.PrepareResult{}
	}
	return out, nil
}

func (d driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		d.log.Info("unprepared claim", "claim", c.String())
		out[c.UID] = nil
	}
	return out, nil
}

func (d driver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "error", err)
}

// WatchHealthStatus reports no health: the fake GPUs have none.
func (driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
