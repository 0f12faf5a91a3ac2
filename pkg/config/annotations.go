package config

import (
	"fmt"
	"slices"
	"strings"
)

// AnnotationSMCR asks for SMC-R acceleration of the pod's TCP.
const AnnotationSMCR = "network.alibabacloud.com/erdma-smcr"

// SMCRRequested reads the SMC-R annotation. Only "true" and "false" (any
// case) are understood; any other value is ignored with a warning, since the
// pod author controls it and it must never fail sandbox creation.
func (c *NetConf) SMCRRequested() (bool, string) {
	v, ok := c.RuntimeConfig.PodAnnotations[AnnotationSMCR]
	if !ok {
		return false, ""
	}
	// strings.ToLower, not EqualFold: Unicode folding would take "falſe"
	// (long s) for "false"; no rune lowers to an ASCII letter of these words.
	switch strings.ToLower(v) {
	case "true":
		return true, ""
	case "false":
		return false, ""
	}
	// %q may show a byte as four characters: 16 bytes keep the warning short.
	if len(v) > 16 {
		v = v[:16] + "..."
	}
	return false, fmt.Sprintf("annotation %s=%q ignored: want \"true\" or \"false\"", AnnotationSMCR, v)
}

// SMCRFor reads the SMC-R annotation for a pod of namespace: requested,
// and allowed by smcr.enabled and smcr.namespaces. A request the conflist
// does not allow is ignored with a warning, never an error: the pod author
// controls the annotation, the node's admin what it may change.
func (c *NetConf) SMCRFor(namespace string) (bool, string) {
	on, warning := c.SMCRRequested()
	if !on {
		return false, warning
	}
	if why := c.SMCRRefusal(namespace); why != "" {
		return false, fmt.Sprintf("annotation %s ignored: %s", AnnotationSMCR, why)
	}
	return true, ""
}

// SMCRRefusal says why the network gives no SMC-R to a pod of namespace
// (smcr.enabled false, or a namespace not in smcr.namespaces), "" when it
// does, whoever asks: the annotation or a DeviceClass's configuration.
func (c *NetConf) SMCRRefusal(namespace string) string {
	switch {
	case c.SMCR.Enabled != nil && !*c.SMCR.Enabled:
		return "smcr.enabled is false on network " + c.Name
	case c.SMCR.Namespaces != nil && !slices.Contains(c.SMCR.Namespaces, namespace):
		return fmt.Sprintf("namespace %q is not in smcr.namespaces of network %s", namespace, c.Name)
	}
	return ""
}
