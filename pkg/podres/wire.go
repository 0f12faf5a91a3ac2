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
//	ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; ...
//	                           repeated DynamicResource dynamic_resources = 5; }
//	ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; ... }
//	DynamicResource          { string claim_name = 2; string claim_namespace = 3;
//	                           repeated ClaimResource claim_resources = 4; }
//	ClaimResource            { repeated CDIDevice cdi_devices = 1; string driver_name = 2;
//	                           string pool_name = 3; string device_name = 4; optional string share_id = 5; }
//	CDIDevice                { string name = 1; }
//
// Fields not listed are skipped.

// podResources is the part of a PodResources the client reads: the devices
// of all containers, in kubelet's order.
type podResources struct {
	namespace, name string
	containerDevs   []containerDevices
	claimDevs       []ClaimDevice
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

// decodeContainer appends a ContainerResources' devices and DRA claim
// devices to p.
func (p *podResources) decodeContainer(b []byte) error {
	return pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Type != pbwire.Bytes {
			return nil
		}
		switch f.Num {
		case 2:
			return p.decodeDevices(f.Bytes)
		case 5:
			return p.decodeDynamic(f.Bytes)
		}
		return nil
	})
}

// decodeDevices appends one ContainerDevices to p.
func (p *podResources) decodeDevices(b []byte) error {
	var d containerDevices
	err := pbwire.Fields(b, func(f pbwire.Field) error {
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
}

// decodeDynamic appends the devices of one DynamicResource (a claim) to p.
func (p *podResources) decodeDynamic(b []byte) error {
	var claimNS, claimName string
	var devs [][]byte
	err := pbwire.Fields(b, func(f pbwire.Field) error {
		switch {
		case f.Type != pbwire.Bytes:
		case f.Num == 2:
			claimName = f.String()
		case f.Num == 3:
			claimNS = f.String()
		case f.Num == 4:
			devs = append(devs, f.Bytes)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, db := range devs {
		d := ClaimDevice{ClaimNamespace: claimNS, ClaimName: claimName}
		if err := d.decode(db); err != nil {
			return err
		}
		p.claimDevs = append(p.claimDevs, d)
	}
	return nil
}

// decode reads one ClaimResource into d.
func (d *ClaimDevice) decode(b []byte) error {
	return pbwire.Fields(b, func(f pbwire.Field) error {
		if f.Type != pbwire.Bytes {
			return nil
		}
		switch f.Num {
		case 1:
			return pbwire.Fields(f.Bytes, func(cdi pbwire.Field) error {
				if cdi.Num == 1 && cdi.Type == pbwire.Bytes {
					d.CDIDevices = append(d.CDIDevices, cdi.String())
				}
				return nil
			})
		case 2:
			d.Driver = f.String()
		case 3:
			d.Pool = f.String()
		case 4:
			d.Device = f.String()
		case 5:
			d.ShareID = f.String()
		}
		return nil
	})
}
