//go:build containerd

package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNamespace is the Kubernetes namespace of every test pod.
const podNamespace = "rdma-e2e"

// cri is a minimal CRI client: the pod sandbox calls kubelet makes.
type cri struct {
	conn     *grpc.ClientConn
	rt       runtimeapi.RuntimeServiceClient
	statuses atomic.Int64 // CRI Status calls made
}

// dialCRI connects to containerd's CRI service on its grpc socket.
func dialCRI(socket string) (*cri, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &cri{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// waitReady polls Status until the runtime and the network (a CNI config
// loaded from conf_dir) are ready.
func (c *cri) waitReady(ctx context.Context) error {
	var last string
	for ctx.Err() == nil {
		resp, err := c.runtimeStatus(ctx, false)
		if err == nil && ready(resp.GetStatus()) {
			return nil
		}
		last = fmt.Sprint(resp.GetStatus(), err)
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("CRI not ready: %s", last)
}

// runtimeStatus is CRI Status, as kubelet polls it; verbose adds the info
// map (containerd puts its loaded CNI config under "cniconfig").
func (c *cri) runtimeStatus(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	c.statuses.Add(1)
	return c.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
}

// networkCondition is the NetworkReady condition of a CRI Status answer.
func networkCondition(resp *runtimeapi.StatusResponse) *runtimeapi.RuntimeCondition {
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	return nil
}

// waitCNIConfig polls verbose Status until containerd's loaded CNI config
// contains want (after the conflist was rewritten).
func (c *cri) waitCNIConfig(ctx context.Context, want string) error {
	var last string
	escaped, _ := json.Marshal(want) // the conflist's source is a JSON string there
	for ctx.Err() == nil {
		resp, err := c.runtimeStatus(ctx, true)
		if err == nil {
			last = resp.GetInfo()["cniconfig"]
			if strings.Contains(last, want) || strings.Contains(last, strings.Trim(string(escaped), `"`)) {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("containerd did not load a CNI config containing %q; last: %.300s", want, last)
}

func ready(s *runtimeapi.RuntimeStatus) bool {
	n := 0
	for _, c := range s.GetConditions() {
		if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && c.Status {
			n++
		}
	}
	return n == 2
}

// podConfig is a pod sandbox as kubelet would describe it.
func podConfig(name, uid, logDir string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: podNamespace, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"app": name},
		Annotations:  annotations,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
}

// run is RunPodSandbox; it returns the sandbox ID.
func (c *cri) run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	return resp.GetPodSandboxId(), err
}

// status is PodSandboxStatus.
func (c *cri) status(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	return resp.GetStatus(), err
}

// stop is StopPodSandbox.
func (c *cri) stop(ctx context.Context, id string) error {
	_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

// remove is RemovePodSandbox.
func (c *cri) remove(ctx context.Context, id string) error {
	_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// list is ListPodSandbox: the IDs of the sandboxes the runtime has.
func (c *cri) list(ctx context.Context) ([]string, error) {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	var ids []string
	for _, s := range resp.GetItems() {
		ids = append(ids, s.Id)
	}
	return ids, err
}

// removeAll stops and removes every sandbox left, so that containerd's
// shims exit and its netns and shm mounts go before containerd stops.
func (c *cri) removeAll(ctx context.Context) []error {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, s := range resp.GetItems() {
		if err := c.stop(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.Id, err))
		}
		if err := c.remove(ctx, s.Id); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.Id, err))
		}
	}
	return errs
}
