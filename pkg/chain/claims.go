package chain

import (
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// claimed are the DRA claim devices kubelet reports for the pod: those of
// the conf's draDrivers, and every other driver's.
type claimed struct {
	served, foreign []podres.ClaimDevice
}

// applyClaims adds the RDMA devices the pod's served claim devices name to
// req, and takes out of offered every device another DRA driver allocated
// to the pod, which the plugin never touches. A claim device names the
// offered RDMA device whose DRA name (rdma.DRADeviceName, as pkg/dra
// publishes it) it is; the pool is not compared: kubelet reports only this
// node's claims, and pkg/dra names its pool after the node. On a
// podSoftRoCE network the one name served is the NIC's (claimOwners).
func applyClaims(c *call, req *request, cl claimed, offered []rdma.Device) ([]rdma.Device, []state.Claim, error) {
	offered = withoutForeign(c, cl.foreign, offered)
	owners := claimOwners(c.conf.PodSoftRoCE, offered)
	var recorded []state.Claim
	for _, d := range cl.served {
		claim := state.Claim{Namespace: d.ClaimNamespace, Name: d.ClaimName, Driver: d.Driver, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID}
		switch o := owners[d.Device]; len(o) {
		case 1:
			claim.RDMADevice = o[0].Name
			req.ids = append(req.ids, o[0].Name)
		case 0:
			if nic := c.conf.PodSoftRoCE; nic != "" {
				return nil, nil, softRoCEClaimRefused(d, nic, cl.foreign)
			}
			if !config.ValidDeviceID(d.Device) {
				return nil, nil, cniErrorf(CodeNoDevice, "DRA device %q of claim %s/%s (driver %s) is malformed",
					truncate(d.Device), truncate(d.ClaimNamespace), truncate(d.ClaimName), d.Driver)
			}
			// Not offered here: selection says why (held by another pod
			// in exclusive mode, or no such device).
			c.log.Info("DRA device names no offered RDMA device",
				"claim", d.ClaimNamespace+"/"+d.ClaimName, "driver", d.Driver, "device", d.Device)
			req.ids = append(req.ids, d.Device)
		default:
			return nil, nil, cniErrorf(CodeNoDevice, "DRA device %q of claim %s/%s names %d RDMA devices of this node (%s, %s): refused",
				d.Device, d.ClaimNamespace, d.ClaimName, len(o), o[0].Name, o[1].Name)
		}
		recorded = append(recorded, claim)
	}
	return offered, recorded, nil
}

// claimOwners maps each DRA device name a served claim device may have to
// the offered devices of that name. With podSoftRoCE (nic) the one name is
// rdma.SoftRoCEDRAName(nic), under which pkg/dra publishes the NIC, and it
// names the pod's own rxe device, the one softRoCEOffer offers: that device
// is made at this ADD, so no claim could have named it. Any other name,
// the rxe device's own DRA name included, names nothing here.
func claimOwners(nic string, offered []rdma.Device) map[string][]rdma.Device {
	if nic == "" {
		return rdma.DRANameOwners(offered)
	}
	out := map[string][]rdma.Device{}
	if name := rdma.SoftRoCEDRAName(nic); name != "" && len(offered) > 0 {
		out[name] = offered
	}
	return out
}

// withoutForeign drops from offered every device another DRA driver's
// claim device names by its RDMA device or netdev name (as dranet names
// its devices), each with a log line.
func withoutForeign(c *call, foreign []podres.ClaimDevice, offered []rdma.Device) []rdma.Device {
	logForeign(c, foreign, "never touched")
	if len(foreign) == 0 {
		return offered
	}
	var out []rdma.Device
	for _, d := range offered {
		if f, ok := foreignOwner(foreign, d); ok {
			c.log.Info("RDMA device not offered to this pod: another DRA driver allocated it",
				"device", d.Name, "netdev", d.Netdev, "driver", f.Driver, "claim", f.ClaimNamespace+"/"+f.ClaimName, "claimDevice", f.Device)
			continue
		}
		out = append(out, d)
	}
	return out
}

// foreignOwner returns the foreign claim device that names d.
func foreignOwner(foreign []podres.ClaimDevice, d rdma.Device) (podres.ClaimDevice, bool) {
	names := []string{d.Name, rdma.DRADeviceName(d.Name)}
	if d.Netdev != "" {
		names = append(names, d.Netdev, rdma.DRADeviceName(d.Netdev))
	}
	for _, f := range foreign {
		for _, n := range names {
			if n != "" && f.Device == n {
				return f, true
			}
		}
	}
	return podres.ClaimDevice{}, false
}

// logForeign says, once per device, that a claim device of another DRA
// driver is left to it.
func logForeign(c *call, foreign []podres.ClaimDevice, why string) {
	for _, f := range foreign {
		c.log.Info("DRA device of a driver this network does not serve: left alone ("+why+")",
			"driver", f.Driver, "claim", f.ClaimNamespace+"/"+f.ClaimName, "device", f.Device)
	}
}

// softRoCEClaimRefused is the refusal of a served claim device on a
// podSoftRoCE network that names no device offered to the pod: the NIC's
// own name when another DRA driver's claim holds the NIC (withoutForeign
// took the pod's rxe device out), any other name always.
func softRoCEClaimRefused(d podres.ClaimDevice, nic string, foreign []podres.ClaimDevice) error {
	if d.Device == rdma.SoftRoCEDRAName(nic) {
		if f, ok := foreignOwner(foreign, rdma.Device{Netdev: nic}); ok {
			return cniErrorf(CodeNoDevice, "DRA device %q of claim %s/%s: its NIC %s is also allocated to this pod by driver %s (claim %s/%s, device %s), which the plugin never touches",
				d.Device, truncate(d.ClaimNamespace), truncate(d.ClaimName), nic, f.Driver, truncate(f.ClaimNamespace), truncate(f.ClaimName), truncate(f.Device))
		}
	}
	return cniErrorf(CodeNoDevice, "DRA device %q of claim %s/%s (driver %s) is not %s, the soft-RoCE NIC %s this network serves (podSoftRoCE)",
		truncate(d.Device), truncate(d.ClaimNamespace), truncate(d.ClaimName), d.Driver, rdma.SoftRoCEDRAName(nic), nic)
}
