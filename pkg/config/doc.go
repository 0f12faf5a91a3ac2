// Package config parses and validates the plugin's entry in a conflist, the
// runtime-provided runtimeConfig and prevResult, CNI_ARGS and the pod
// annotations it reads. It is the edge of the plugin: everything a pod
// author, the runtime or the previous plugin can influence is parsed strictly
// here, once, and the other packages trust the values it returns.
//
// Keys match exactly: a key that differs from a known one only in case is
// ignored with a warning, never used. Errors are *types.Error naming the
// field: code 7 for the configuration and CNI_ARGS, code 6 for prevResult,
// code 1 (the CNI spec's "incompatible CNI version") for a cniVersion the
// plugin does not support.
package config
