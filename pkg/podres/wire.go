package podres

import (
	"fmt"

	"github.com/rdma-chain/rdma-chain/internal/pbwire"
)

// The messages of kubelet's podresources v1 api.proto that the client
// exchanges, by field number:
//
//	GetPodResourcesRequest   { string pod_name = 1; string pod_namespace = 2; }
//	GetPodResourcesResponse  { PodResources pod_resources = 1; }
//	ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
//	PodResources             { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }
//	ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; ... }
//	ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; ... }
//
// Fields not listed are skipped.

// podResources is the part of a PodResources the client reads: the devices
// of all containers, in kubelet's order.
type podResources struct {
	namespace, name string
	containerDevs   []containerDevices
}

type containerDevices struct {
	resourceName string
	deviceIDs    []string
}

func (p *podResources) devices() []containerDevices {
	if p == nil {
		return nil
	}
	return p.containerDevs
}

func encodeGetRequest(namespace, name string) []byte {
	b := pbwire.AppendString(nil, 1, name)
	return pbwire.AppendString(b, 2, namespace)
}

// decodeGetResponse returns the pod of a GetPodResourcesResponse (nil if
// the reply holds none).
func decodeGetResponse(b []byte) (*podResources, error) {
	var pod *podResources
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Num != 1 || f.Type != pbwire.Bytes {
			return nil
		}
		var err error
		pod, err = decodePod(f.Bytes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decode GetPodResourcesResponse: %w", err)
	}
	return pod, nil
}

// findInList returns the pod namespace/name of a ListPodResourcesResponse,
// decoding the containers of that pod only (nil if it is not listed).
func findInList(b []byte, namespace, name string) (*podResources, error) {
	var found *podResources
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Num != 1 || f.Type != pbwire.Bytes || found != nil {
			return nil
		}
		if is, err := podIs(f.Bytes, namespace, name); err != nil || !is {
			return err
		}
		var err error
		found, err = decodePod(f.Bytes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decode ListPodResourcesResponse: %w", err)
	}
	return found, nil
}

// podIs reports whether the PodResources b is the pod namespace/name,
// without allocating: List walks every pod of the node.
func podIs(b []byte, namespace, name string) (bool, error) {
	var nsOK, nameOK bool
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		switch {
		case f.Type != pbwire.Bytes:
		case f.Num == 1:
			nameOK = string(f.Bytes) == name
		case f.Num == 2:
			nsOK = string(f.Bytes) == namespace
		}
		return nil
	})
	return nsOK && nameOK, err
}

// decodePod decodes a PodResources.
func decodePod(b []byte) (*podResources, error) {
	p := &podResources{}
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Type != pbwire.Bytes {
			return nil
		}
		switch f.Num {
		case 1:
			p.name = f.String()
		case 2:
			p.namespace = f.String()
		case 3:
			return p.decodeContainer(f.Bytes)
		}
		return nil
	})
	return p, err
}

// decodeContainer appends a ContainerResources' devices to p.
func (p *podResources) decodeContainer(b []byte) error {
	return pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Num != 2 || f.Type != pbwire.Bytes {
			return nil
		}
		var d containerDevices
		err := pbwire.Fields(f.Bytes, func(f pbwire.Field) error {
			switch {
			case f.Type != pbwire.Bytes:
			case f.Num == 1:
				d.resourceName = f.String()
			case f.Num == 2:
				d.deviceIDs = append(d.deviceIDs, f.String())
			}
			return nil
		})
		p.containerDevs = append(p.containerDevs, d)
		return err
	})
}
