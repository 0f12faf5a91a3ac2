package dra

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// ReasonInvalidConfig means Prepare refused the claim's configuration (an
// RDMAConfig of its DeviceClass or its own): the pod does not start. The
// condition's message is Prepare's error, which names the field.
const ReasonInvalidConfig = "InvalidConfig"

// configError is a claim's configuration that Prepare refused.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// claimConfigs resolves the configuration of each of claim's results of
// this driver, by index in its results. The entries of
// status.allocation.devices.config of this driver apply to a result when
// their requests are none or name its request, or the main request of its
// subrequest ("main/sub"), as resourceclaim.ConfigForResult reads them:
// the DeviceClass's first, the claim's over them (config.ClaimConfig.Over),
// each in the order of the list. Every entry of this driver is parsed,
// even one that applies to no result. A zero configuration is no entry.
func claimConfigs(claim *resourceapi.ResourceClaim) (map[int]config.ClaimConfig, error) {
	alloc := claim.Status.Allocation.Devices
	parsed := map[int]config.ClaimConfig{}
	for i, e := range alloc.Config {
		if e.Opaque == nil || e.Opaque.Driver != DriverName {
			continue
		}
		c, err := config.ParseClaimConfig(e.Opaque.Parameters.Raw)
		if err == nil && !fromClass(e) {
			err = config.ClaimConfigFromClaim(c)
		}
		if err != nil {
			return nil, &configError{fmt.Errorf("claim %s/%s: status.allocation.devices.config[%d] (%s of the %s): %w",
				claim.Namespace, claim.Name, i, config.ClaimConfigKind, sourceName(e), err)}
		}
		parsed[i] = c
	}
	out := map[int]config.ClaimConfig{}
	for ri, r := range alloc.Results {
		if r.Driver != DriverName {
			continue
		}
		var c config.ClaimConfig
		for _, class := range []bool{true, false} {
			for i, e := range alloc.Config {
				if p, ok := parsed[i]; ok && fromClass(e) == class && appliesTo(e.Requests, r.Request) {
					c = c.Over(p)
				}
			}
		}
		if !c.IsZero() {
			out[ri] = c
		}
	}
	return out, oneDevicePerIfName(claim, out)
}

// fromClass reports whether e comes from the DeviceClass; any other
// source is read as the claim's, which may set less.
func fromClass(e resourceapi.DeviceAllocationConfiguration) bool {
	return e.Source == resourceapi.AllocationConfigSourceClass
}

// sourceName names where e comes from, as messages say it.
func sourceName(e resourceapi.DeviceAllocationConfiguration) string {
	if fromClass(e) {
		return "DeviceClass"
	}
	return "ResourceClaim"
}

// appliesTo reports whether a config entry with requests applies to the
// result of request ref: upstream's rule (resourceclaim.ConfigForResult).
func appliesTo(requests []string, ref string) bool {
	return len(requests) == 0 || slices.Contains(requests, ref) || slices.Contains(requests, resourceclaim.BaseRequestRef(ref))
}

// oneDevicePerIfName refuses an interface name that two of the claim's
// devices of this driver would take: one name is one interface in the pod.
func oneDevicePerIfName(claim *resourceapi.ResourceClaim, cfgs map[int]config.ClaimConfig) error {
	results := claim.Status.Allocation.Devices.Results
	taken := map[string]int{}
	for _, ri := range slices.Sorted(maps.Keys(cfgs)) {
		name := cfgs[ri].IfName
		if name == "" {
			continue
		}
		if first, ok := taken[name]; ok {
			return &configError{fmt.Errorf("claim %s/%s: field \"ifName\": %q is asked for both device %s (request %s) and device %s (request %s); one name is one interface",
				claim.Namespace, claim.Name, name, results[first].Device, results[first].Request, results[ri].Device, results[ri].Request)}
		}
		taken[name] = ri
	}
	return nil
}

// configAnnotations are the CDI device annotations that hand c to the
// plugin; none for a zero c.
func configAnnotations(c config.ClaimConfig) map[string]string {
	if c.IsZero() {
		return nil
	}
	return map[string]string{config.ClaimConfigAnnotation: c.Encode()}
}

// maxInvalidConfigs bounds the claims whose refused configuration is kept
// for their status; the oldest goes first.
const maxInvalidConfigs = 256

// invalidConfigs are the claims whose Prepare refused their configuration,
// by UID, with their status.devices entries, for the StatusWriter. A
// claim's goes when its Prepare succeeds or fails otherwise, or when it
// is unprepared.
type invalidConfigs struct {
	mu    sync.Mutex
	order []types.UID // oldest first
	byUID map[types.UID]invalidConfig
}

type invalidConfig struct {
	ref  claimRef
	devs []deviceStatus
}

// note keeps or drops claim's entry after its Prepare ended with err.
func (ic *invalidConfigs) note(claim *resourceapi.ResourceClaim, pool string, err error) {
	var ce *configError
	if !errors.As(err, &ce) {
		ic.drop(claim.UID)
		return
	}
	devs := allocatedStatuses(claim, pool, deviceStatus{InvalidConfig: true, Message: err.Error()})
	if len(devs) == 0 {
		ic.drop(claim.UID)
		return
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.order = slices.DeleteFunc(ic.order, func(u types.UID) bool { return u == claim.UID })
	ic.order = append(ic.order, claim.UID)
	if ic.byUID == nil {
		ic.byUID = map[types.UID]invalidConfig{}
	}
	ic.byUID[claim.UID] = invalidConfig{ref: claimRef{Namespace: claim.Namespace, Name: claim.Name}, devs: devs}
	if len(ic.order) > maxInvalidConfigs {
		delete(ic.byUID, ic.order[0])
		ic.order = slices.Delete(ic.order, 0, 1)
	}
}

// drop forgets claim uid's entry.
func (ic *invalidConfigs) drop(uid types.UID) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if _, ok := ic.byUID[uid]; ok {
		delete(ic.byUID, uid)
		ic.order = slices.DeleteFunc(ic.order, func(u types.UID) bool { return u == uid })
	}
}

// statuses are the status.devices entries of the claims kept, by claim;
// a claim made again under the same name shows the newer's. Nil when
// none is kept.
func (ic *invalidConfigs) statuses() map[claimRef][]deviceStatus {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if len(ic.order) == 0 {
		return nil
	}
	out := make(map[claimRef][]deviceStatus, len(ic.order))
	for _, uid := range ic.order {
		c := ic.byUID[uid]
		out[c.ref] = slices.Clone(c.devs)
	}
	return out
}
