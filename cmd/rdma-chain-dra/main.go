// Command rdma-chain-dra is rdma-chain's DRA driver for RDMA NICs, run by
// the DaemonSet beside rdma-chain-ops: it publishes the node's RDMA NICs in
// a ResourceSlice and prepares claims through CDI. It is its own binary so
// that only it carries API credentials and the Kubernetes client
// libraries; the CNI plugin reads claims from kubelet's pod-resources API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/dra"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rdma-chain-dra:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := dra.Config{}
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file [in-cluster configuration]")
	flag.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name [$NODE_NAME]")
	flag.StringVar(&cfg.SysRoot, "sys-root", "/sys", "sysfs mount point")
	flag.StringVar(&cfg.CDIDir, "cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from")
	flag.StringVar(&cfg.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "kubelet's root directory (plugins, plugins_registry)")
	flag.StringVar(&cfg.CNIDataDir, "cni-data-dir", config.DefaultDataDir, "the CNI plugin's dataDir (read only: devices exclusive-mode pods hold)")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", conflist.DefaultConfDirPath,
		"the runtime's conflist directory (read only: only devices its rdma-chain entries offer are published)")
	flag.DurationVar(&cfg.Interval, "interval", 30*time.Second, "how often the node's RDMA devices are read again")
	flag.DurationVar(&cfg.StatusInterval, "status-interval", 2*time.Second,
		"how often the CNI plugin's records are looked at for claim status to write (0: write none)")
	flag.IntVar(&cfg.SoftRoCEPods, "soft-roce-pods", dra.DefaultSoftRoCEPods,
		"how many pods may share a podSoftRoCE NIC at once (its capacity pods): each costs the node CPU time for every byte")
	flag.Parse()
	if cfg.NodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if cfg.SoftRoCEPods < 1 {
		return fmt.Errorf("--soft-roce-pods %d: at least 1", cfg.SoftRoCEPods)
	}
	rc, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	cfg.Client, err = kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cfg.OnFatalCancel = cancel
	if err := dra.Run(ctx, cfg); err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
