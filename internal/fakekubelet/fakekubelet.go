// Package fakekubelet serves kubelet's pod-resources v1 API on a unix socket
// from a fixed list of pods, for the integration tiers (netns and VM) where
// no kubelet runs.
package fakekubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"

	"google.golang.org/grpc"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Pod is one pod and the device IDs allocated to it per resource name.
type Pod struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Resources map[string][]string `json:"resources"`
}

// Server is a running fake kubelet.
type Server struct {
	podresv1.UnimplementedPodResourcesListerServer
	pods []Pod
	grpc *grpc.Server
}

// Start listens on socket (replacing a stale file) and serves until Stop.
func Start(socket string, pods []Pod) (*Server, error) {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("fakekubelet: listen %s: %w", socket, err)
	}
	s := &Server{pods: pods, grpc: grpc.NewServer()}
	podresv1.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// Stop closes the socket.
func (s *Server) Stop() { s.grpc.Stop() }

// List returns every pod, as kubelet's List does.
func (s *Server) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	resp := &podresv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, p.resources())
	}
	return resp, nil
}

// Get returns one pod, with kubelet's error text for an unknown pod.
func (s *Server) Get(_ context.Context, req *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	for _, p := range s.pods {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &podresv1.GetPodResourcesResponse{PodResources: p.resources()}, nil
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
	return &podresv1.PodResources{Namespace: p.Namespace, Name: p.Name, Containers: []*podresv1.ContainerResources{c}}
}
