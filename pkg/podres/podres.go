// Package podres asks kubelet, over its pod-resources gRPC API, which devices
// it allocated to a pod for given extended resource names.
package podres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	prv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is kubelet's pod-resources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds every call when New is given a zero timeout.
const DefaultTimeout = 2 * time.Second

// maxRecvMsgSize matches kubelet's own pod-resources client (16 MiB): a List
// reply on a busy node can exceed gRPC's 4 MiB default.
const maxRecvMsgSize = 16 << 20

// ErrUnavailable: the kubelet socket cannot be reached (missing file, refused,
// dial timeout, gRPC Unavailable/DeadlineExceeded). Callers turn it into CNI
// code 11 (try again) with the socket path.
var ErrUnavailable = errors.New("kubelet pod-resources API unavailable")

// Allocation is the set of devices kubelet allocated to a pod for one
// resource name.
type Allocation struct {
	ResourceName string
	DeviceIDs    []string // de-duplicated, in kubelet's order
}

// Client talks to kubelet's pod-resources API. It holds no connection: each
// call dials and closes its own.
type Client struct {
	socket  string
	timeout time.Duration
}

// New returns a client for the unix socket at socket; every call is bounded
// by timeout (0 means DefaultTimeout).
func New(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{socket: socket, timeout: timeout}
}

// Allocated returns the allocations of the pod (all containers kubelet
// reports, including restartable init containers) whose resource name is in
// resourceNames, in the order of resourceNames; resources without devices are
// left out. A pod unknown to kubelet, or with none of the resources, gives an
// empty slice and a nil error.
func (c *Client) Allocated(ctx context.Context, namespace, name string, resourceNames []string) ([]Allocation, error) {
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("ask kubelet for pod resources: pod namespace and name are required (got %q/%q)", namespace, name)
	}
	var pod *prv1.PodResources
	err := c.call(ctx, func(ctx context.Context, cl prv1.PodResourcesListerClient) error {
		var err error
		pod, err = getPod(ctx, cl, namespace, name)
		return err
	})
	if err != nil {
		return nil, c.wrap(fmt.Sprintf("ask kubelet for the resources of pod %s/%s", namespace, name), err)
	}
	return collect(pod, resourceNames), nil
}

// Probe checks that the socket is reachable and that kubelet answers what
// Allocated asks, bounded by the timeout. It asks Get for a pod that cannot
// exist (a name with a character no pod name has): kubelet answers "not
// found" without listing the node's pods, so STATUS, called every few seconds,
// costs the same on a node with 1,000 pods as on an empty one. Only a kubelet
// that does not serve Get is asked List, which Allocated then relies on.
func (c *Client) Probe(ctx context.Context) error {
	err := c.call(ctx, func(ctx context.Context, cl prv1.PodResourcesListerClient) error {
		_, err := getPod(ctx, cl, probeNamespace, probeName)
		return err
	})
	return c.wrap("probe kubelet pod-resources API", err)
}

// probeNamespace/probeName name no pod: Kubernetes names are DNS labels or
// subdomains, which have no '_'.
const (
	probeNamespace = "rdma-chain_probe"
	probeName      = "rdma-chain_probe"
)

// call dials the socket, runs fn under the client timeout and closes the conn.
// The target is never resolved: the passthrough scheme hands a placeholder
// address to a dialer that opens the unix socket itself, and the channel has
// no service config lookup and no retries; a refused or missing socket fails
// the call at once with codes.Unavailable.
func (c *Client) call(ctx context.Context, fn func(context.Context, prv1.PodResourcesListerClient) error) error {
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithContextDialer(c.dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableServiceConfig(),
		grpc.WithDisableRetry(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return fn(ctx, prv1.NewPodResourcesListerClient(conn))
}

func (c *Client) dial(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", c.socket)
}

// wrap names the socket in err and marks unreachable errors with ErrUnavailable.
func (c *Client) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w at %s: %w", what, ErrUnavailable, c.socket, err)
	}
	return fmt.Errorf("%s via %s: %w", what, c.socket, err)
}

// getPod asks Get for the pod and falls back to List when kubelet does not
// serve Get. It returns nil, nil when kubelet does not know the pod.
func getPod(ctx context.Context, cl prv1.PodResourcesListerClient, namespace, name string) (*prv1.PodResources, error) {
	resp, err := cl.Get(ctx, &prv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	switch {
	case err == nil:
		return resp.GetPodResources(), nil
	case getDisabled(err):
		return listPod(ctx, cl, namespace, name)
	case podNotFound(err):
		return nil, nil
	}
	return nil, err
}

func listPod(ctx context.Context, cl prv1.PodResourcesListerClient, namespace, name string) (*prv1.PodResources, error) {
	resp, err := cl.List(ctx, &prv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() == namespace && p.GetName() == name {
			return p, nil
		}
	}
	return nil, nil
}

// getDisabled reports whether kubelet does not serve Get: an older kubelet
// answers Unimplemented; one with the KubeletPodResourcesGet gate off answers
// a plain error (code Unknown) "PodResources API Get method disabled".
func getDisabled(err error) bool {
	s := status.Convert(err)
	return s.Code() == codes.Unimplemented ||
		(s.Code() == codes.Unknown && strings.Contains(s.Message(), "Get method disabled"))
}

// podNotFound reports whether Get failed because kubelet does not know the
// pod: kubelet answers a plain error (code Unknown) "pod <name> in namespace
// <ns> not found"; NotFound is accepted too should kubelet adopt it.
func podNotFound(err error) bool {
	s := status.Convert(err)
	return s.Code() == codes.NotFound ||
		(s.Code() == codes.Unknown && strings.HasSuffix(s.Message(), " not found"))
}

// collect merges the pod's container devices for resourceNames.
func collect(pod *prv1.PodResources, resourceNames []string) []Allocation {
	out := []Allocation{}
	for i, rn := range resourceNames {
		if slices.Contains(resourceNames[:i], rn) {
			continue
		}
		var ids []string
		for _, ctr := range pod.GetContainers() {
			for _, d := range ctr.GetDevices() {
				if d.GetResourceName() != rn {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					if !slices.Contains(ids, id) {
						ids = append(ids, id)
					}
				}
			}
		}
		if len(ids) > 0 {
			out = append(out, Allocation{ResourceName: rn, DeviceIDs: ids})
		}
	}
	return out
}
