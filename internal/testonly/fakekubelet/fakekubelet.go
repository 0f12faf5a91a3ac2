package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"

	"google.golang.org/grpc"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Pod is one pod, the device IDs allocated to it per resource name, and
// the devices of its DRA claims.
type Pod struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Resources map[string][]string `json:"resources"`
	Claims    []Claim             `json:"claims,omitempty"`
}

// Claim is one device of a pod's ResourceClaim as kubelet reports it in
// dynamic_resources (every container of the pod shows it, as kubelet does
// for a claim all containers reference).
type Claim struct {
	Namespace string   `json:"namespace"` // the claim's
	Name      string   `json:"name"`
	Driver    string   `json:"driver"`
	Pool      string   `json:"pool"`
	Device    string   `json:"device"`
	ShareID   string   `json:"shareID,omitempty"`
	CDI       []string `json:"cdi,omitempty"`
}

// Options changes how the fake answers.
type Options struct {
	// GetDisabled answers Get as kubelet does with the KubeletPodResourcesGet
	// feature gate off, so clients fall back to List.
	GetDisabled bool
	// Limiter, when set, limits the calls as kubelet does.
	Limiter *Limiter
}

// Server is a running fake kubelet.
type Server struct {
	podresv1.UnimplementedPodResourcesListerServer
	opts Options
	pods []*podresv1.PodResources // built once: kubelet answers from memory too
	grpc *grpc.Server
}

// Start listens on socket (replacing a stale file) and serves until Stop.
func Start(socket string, pods []Pod) (*Server, error) {
	return StartWith(socket, pods, Options{})
}

// StartWith is Start with options.
func StartWith(socket string, pods []Pod, opts Options) (*Server, error) {
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale kubelet socket %s: %w", socket, err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on kubelet socket %s: %w", socket, err)
	}
	var srvOpts []grpc.ServerOption
	if opts.Limiter != nil {
		srvOpts = append(srvOpts, opts.Limiter.ServerOption())
	}
	s := &Server{opts: opts, grpc: grpc.NewServer(srvOpts...)}
	for _, p := range pods {
		s.pods = append(s.pods, p.resources())
	}
	podresv1.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// Stop closes the socket.
func (s *Server) Stop() { s.grpc.Stop() }

// List returns every pod, as kubelet's List does.
func (s *Server) List(ctx context.Context, _ *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &podresv1.ListPodResourcesResponse{PodResources: s.pods}, nil
}

// Get returns one pod, with kubelet's error texts for an unknown pod and for
// the feature gate off.
func (s *Server) Get(ctx context.Context, req *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.opts.GetDisabled {
		return nil, errors.New("PodResources API Get method disabled")
	}
	for _, p := range s.pods {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &podresv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

func (p Pod) resources() *podresv1.PodResources {
	names := make([]string, 0, len(p.Resources))
	for n := range p.Resources {
		names = append(names, n)
	}
	sort.Strings(names)
	c := &podresv1.ContainerResources{Name: "main"}
	for _, n := range names {
		c.Devices = append(c.Devices, &podresv1.ContainerDevices{ResourceName: n, DeviceIds: p.Resources[n]})
	}
	for _, cl := range p.Claims {
		c.DynamicResources = append(c.DynamicResources, cl.resource())
	}
	return &podresv1.PodResources{Namespace: p.Namespace, Name: p.Name, Containers: []*podresv1.ContainerResources{c}}
}

func (cl Claim) resource() *podresv1.DynamicResource {
	r := &podresv1.ClaimResource{DriverName: cl.Driver, PoolName: cl.Pool, DeviceName: cl.Device}
	if cl.ShareID != "" {
		id := cl.ShareID
		r.ShareId = &id
	}
	for _, n := range cl.CDI {
		r.CdiDevices = append(r.CdiDevices, &podresv1.CDIDevice{Name: n})
	}
	return &podresv1.DynamicResource{ClaimName: cl.Name, ClaimNamespace: cl.Namespace, ClaimResources: []*podresv1.ClaimResource{r}}
}
