package chain

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// podConf is what the configurations of the pod's claims (pkg/dra's
// RDMAConfig, config.ClaimConfig) make of the conf's per-pod settings for
// one ADD. The zero value keeps the conf's. ADD reads it through the call's
// accessors (sharedLink, podBlock, leasing, smcrOn, podIfNames); DEL, GC,
// CHECK and reclaim read only records, which keep what it changed: each
// link's pod name, kind, lease and range, and the SMC-R state.
type podConf struct {
	// sharedLink replaces the conf's sharedLink when set (shared mode).
	sharedLink *config.SharedLink
	// noIPv6 says a claim turned podIPv6Block off; with it the IPAM
	// serves only the block, so the pod's interfaces take no lease at all.
	noIPv6 bool
	// smcr is a claim's SMC-R decision; nil: the annotation's.
	smcr *bool
	// ifNames maps an RDMA device to its interface's name in the pod.
	ifNames map[string]string
}

// claimConf is the configuration of one served claim device.
type claimConf struct {
	claim      string // namespace/name, for messages
	rdmaDevice string // the RDMA device it maps to, "" when none offered
	cfg        config.ClaimConfig
}

// claimPodConf reads the configuration of each served claim device of
// pkg/dra's driver (recorded[i] is served[i] mapped by applyClaims) and
// returns what they make of the conf for this pod in mode. Claims that
// disagree on a pod-wide field, an ifName that clashes, and a field the
// network cannot serve are refused (CodeClaimConfig) before any change.
func claimPodConf(c *call, mode rdma.Mode, served []podres.ClaimDevice, recorded []state.Claim) (podConf, error) {
	confs, err := readClaimConfigs(c, served, recorded)
	if err != nil || len(confs) == 0 {
		return podConf{}, err
	}
	pc, wide, err := mergeClaimConfs(c, confs)
	if err != nil {
		return podConf{}, err
	}
	if err := applyIPv6(c, &pc, wide); err != nil {
		return podConf{}, err
	}
	if err := applySharedLink(c, &pc, mode, wide); err != nil {
		return podConf{}, err
	}
	applySMCR(c, &pc, wide)
	return pc, nil
}

// readClaimConfigs reads the configuration of each served claim device of
// pkg/dra's driver from its claim's CDI spec file (each file once). Only
// those with a configuration are returned.
func readClaimConfigs(c *call, served []podres.ClaimDevice, recorded []state.Claim) ([]claimConf, error) {
	specs := map[string]*cdiSpec{}
	var out []claimConf
	for i, d := range served {
		if d.Driver != config.DefaultDRADriver {
			continue
		}
		cfg, err := claimConfigOf(c, d, specs)
		if err != nil {
			return nil, err
		}
		if cfg.IsZero() {
			continue
		}
		cc := claimConf{claim: claimName(d), cfg: cfg}
		if i < len(recorded) {
			cc.rdmaDevice = recorded[i].RDMADevice
		}
		c.log.Info("claim configuration", "claim", cc.claim, "device", d.Device, "config", cfg.String())
		out = append(out, cc)
	}
	return out, nil
}

// claimConfigOf is d's configuration: the config.ClaimConfigAnnotation of
// its device in its claim's CDI spec, none without the annotation (a
// driver older than the configuration). A spec file that cannot be read
// or decoded, or lacks the device, is an error: what the plugin cannot
// see is not taken for "no configuration".
func claimConfigOf(c *call, d podres.ClaimDevice, specs map[string]*cdiSpec) (config.ClaimConfig, error) {
	uid, name, ok, err := claimCDIName(d)
	if err != nil {
		return config.ClaimConfig{}, cniError(CodeClaimConfig, fmt.Sprintf("claim %s, DRA device %q: its CDI device", claimName(d), truncate(d.Device)), err)
	}
	if !ok {
		c.log.Info("kubelet reports no CDI device of rdma-chain-dra for the claim device: no claim configuration",
			"claim", claimName(d), "device", d.Device)
		return config.ClaimConfig{}, nil
	}
	path := cdiSpecPath(c.conf.CDIDir, uid)
	spec, read := specs[uid]
	if !read {
		if spec, err = readCDISpec(path); err != nil {
			return config.ClaimConfig{}, cniError(CodeClaimConfig, fmt.Sprintf("claim %s: cannot read its CDI spec", claimName(d)), err)
		}
		specs[uid] = spec
	}
	dev, ok := spec.device(name)
	if !ok {
		return config.ClaimConfig{}, cniErrorf(CodeClaimConfig, "claim %s: its CDI spec %s has no device %s", claimName(d), path, name)
	}
	raw, ok := dev.Annotations[config.ClaimConfigAnnotation]
	if !ok {
		return config.ClaimConfig{}, nil
	}
	cfg, err := config.ParseClaimConfig([]byte(raw))
	if err != nil {
		return config.ClaimConfig{}, cniError(CodeClaimConfig, fmt.Sprintf("claim %s: annotation %s of device %s in %s",
			claimName(d), config.ClaimConfigAnnotation, name, path), err)
	}
	return cfg, nil
}

// mergeClaimConfs merges the claims' pod-wide fields (smcr, ipv6,
// sharedLink), which must agree, and maps each RDMA device to the ifName
// its claims give it. It returns the pod-wide fields with, for each, the
// claim that set it.
func mergeClaimConfs(c *call, confs []claimConf) (podConf, map[string]setting, error) {
	pc := podConf{ifNames: map[string]string{}}
	wide := map[string]setting{}
	owner := map[string]claimConf{} // pod interface name -> the claim that set it
	for _, cc := range confs {
		for _, f := range wideFields(cc.cfg) {
			if prev, ok := wide[f.field]; ok && prev.value != f.value {
				return pc, nil, cniErrorf(CodeClaimConfig, "claims %s and %s configure %s differently (%s, %s)", prev.claim, cc.claim, f.field, prev.value, f.value)
			}
			wide[f.field] = setting{value: f.value, claim: cc.claim}
		}
		name := cc.cfg.IfName
		switch prev, taken := owner[name]; {
		case name == "":
			continue
		case name == c.args.IfName:
			return pc, nil, cniErrorf(CodeClaimConfig, "claim %s: ifName %s is the pod's interface of the primary plugin (CNI_IFNAME)", cc.claim, name)
		case cc.rdmaDevice == "":
			continue // selection refuses the device
		case taken && prev.rdmaDevice != cc.rdmaDevice:
			return pc, nil, cniErrorf(CodeClaimConfig, "claims %s and %s give two RDMA devices (%s, %s) one ifName %s", prev.claim, cc.claim, prev.rdmaDevice, cc.rdmaDevice, name)
		case pc.ifNames[cc.rdmaDevice] != "" && pc.ifNames[cc.rdmaDevice] != name:
			return pc, nil, cniErrorf(CodeClaimConfig, "claims %s and %s give RDMA device %s two ifNames (%s, %s)",
				owner[pc.ifNames[cc.rdmaDevice]].claim, cc.claim, cc.rdmaDevice, pc.ifNames[cc.rdmaDevice], name)
		}
		owner[name], pc.ifNames[cc.rdmaDevice] = cc, name
	}
	return pc, wide, nil
}

// setting is a pod-wide field's value and the claim that set it.
type setting struct{ value, claim string }

// wideFields are the pod-wide fields cfg sets, as strings, in a fixed
// order.
func wideFields(cfg config.ClaimConfig) []struct{ field, value string } {
	var out []struct{ field, value string }
	add := func(field, value string) { out = append(out, struct{ field, value string }{field, value}) }
	if cfg.SMCR != nil {
		add("smcr", strconv.FormatBool(*cfg.SMCR))
	}
	if cfg.IPv6 != nil {
		add("ipv6", strconv.FormatBool(*cfg.IPv6))
	}
	if cfg.SharedLink != "" {
		add("sharedLink", cfg.SharedLink)
	}
	return out
}

// applyIPv6 takes the claims' ipv6: false turns podIPv6Block off for
// the pod; true needs it.
func applyIPv6(c *call, pc *podConf, wide map[string]setting) error {
	s, ok := wide["ipv6"]
	if !ok {
		return nil
	}
	_, block := c.conf.PodBlock()
	switch {
	case s.value == "true" && !block:
		return cniErrorf(CodeClaimConfig, "claim %s: field ipv6 is true but network %s has no podIPv6Block to address the pod from", s.claim, c.conf.Name)
	case s.value == "false" && block:
		c.log.Info("claim configuration: no podIPv6Block address (nor IPAM lease) on the pod's RDMA interfaces", "claim", s.claim)
		pc.noIPv6 = true
	case s.value == "false" && c.conf.HasIPAM():
		c.log.Warn("claim configuration ipv6 false: network "+c.conf.Name+" has no podIPv6Block to turn off; its ipam's addresses stay", "claim", s.claim)
	}
	return nil
}

// applySharedLink sets the shared-mode link type, with the mode the conf
// gives that type (its own for its own type, else the default); a
// podSoftRoCE network serves only macvlan children. In exclusive mode the
// netdev itself moves: the field does not apply.
func applySharedLink(c *call, pc *podConf, mode rdma.Mode, wide map[string]setting) error {
	s, ok := wide["sharedLink"]
	if !ok {
		return nil
	}
	if mode == rdma.ModeExclusive {
		c.log.Info("claim configuration: sharedLink does not apply in exclusive mode (the netdev itself moves)", "claim", s.claim, "sharedLink", s.value)
		return nil
	}
	if nic := c.conf.PodSoftRoCE; nic != "" && s.value != config.LinkMACVlan {
		return cniErrorf(CodeClaimConfig, "claim %s: field sharedLink is %s but network %s gives each pod a soft-RoCE device on a macvlan child of %s (podSoftRoCE)",
			s.claim, s.value, c.conf.Name, nic)
	}
	link := config.SharedLink{Type: s.value, Mode: config.DefaultSharedLinkMode(s.value)}
	if s.value == c.conf.SharedLink.Type {
		link.Mode = c.conf.SharedLink.Mode
	}
	pc.sharedLink = &link
	return nil
}

// applySMCR takes the claims' SMC-R decision: a DeviceClass's (pkg/dra
// refuses smcr true in a claim's own configuration). The class says
// whether, the network where: smcr.enabled false and smcr.namespaces
// still apply, as to the annotation. Off overrides the annotation.
func applySMCR(c *call, pc *podConf, wide map[string]setting) {
	s, ok := wide["smcr"]
	if !ok {
		return
	}
	on, why := s.value == "true", c.conf.SMCRRefusal(c.pod.Namespace)
	switch annotated, _ := c.conf.SMCRFor(c.pod.Namespace); {
	case on && why != "":
		c.log.Warn("claim configuration smcr true ignored: "+why, "claim", s.claim)
		on = false
	case on:
		c.log.Info("claim configuration: SMC-R on", "claim", s.claim)
	case annotated:
		c.log.Warn("annotation "+config.AnnotationSMCR+" overridden: the claim's configuration sets smcr false", "claim", s.claim)
	}
	pc.smcr = &on
}

// claimName is d's claim as messages name it.
func claimName(d podres.ClaimDevice) string {
	return truncate(d.ClaimNamespace) + "/" + truncate(d.ClaimName)
}

// sharedLink is the pod's shared-mode link: a claim's, else the conf's.
func (c *call) sharedLink() config.SharedLink {
	if c.podConf.sharedLink != nil {
		return *c.podConf.sharedLink
	}
	return c.conf.SharedLink
}

// podBlock is the conf's podIPv6Block unless a claim turned it off.
func (c *call) podBlock() (netip.Prefix, bool) {
	if c.podConf.noIPv6 {
		return netip.Prefix{}, false
	}
	return c.conf.PodBlock()
}

// leasing reports whether the pod's RDMA interfaces take IPAM leases: the
// conf has an ipam section, and it is not one that serves only a
// podIPv6Block a claim turned off.
func (c *call) leasing() bool { return c.conf.HasIPAM() && !c.podConf.noIPv6 }

// smcrOn reports whether the pod gets SMC-R: a claim's decision, else the
// annotation's as the conf allows it.
func (c *call) smcrOn() bool {
	if c.podConf.smcr != nil {
		return *c.podConf.smcr
	}
	on, _ := c.conf.SMCRFor(c.pod.Namespace)
	return on
}

// podIfNames names the pod's interface of each of devs: a claim's ifName,
// else the conf's i-th name. Two devices of one name are refused.
func (c *call) podIfNames(devs []rdma.Device) ([]string, error) {
	names := make([]string, len(devs))
	seen := map[string]string{}
	for i, d := range devs {
		names[i] = c.conf.PodIfName(i)
		if n := c.podConf.ifNames[d.Name]; n != "" {
			names[i] = n
		}
		if other, dup := seen[names[i]]; dup {
			return nil, cniErrorf(CodeClaimConfig, "RDMA devices %s and %s would both be %s in the pod: a claim's ifName takes the name of another interface of the pod",
				other, d.Name, names[i])
		}
		seen[names[i]] = d.Name
	}
	return names, nil
}
