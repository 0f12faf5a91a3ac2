// Package hookmap lists, unlists and looks up pod netns in the pinned netns
// map of the SMC socket hook (pkg/smc/hook) with raw bpf(2) calls through
// golang.org/x/sys/unix. Once a node's program is loaded and pinned, an
// SMC-R pod's ADD, DEL and CHECK need nothing more: the plugin opens the
// pin and updates, deletes or looks up one key, and does not exec the hook
// binary, which links cilium/ebpf and parses the kernel's BTF. Only loading
// and attaching (no pin yet) and detaching (the last netns gone) run it.
//
// The package links nothing beyond x/sys: the plugin starts for every pod.
// It opens only a pin on a bpffs, reached without following a symbolic
// link, and only a map that is the hook's (type, key and value size, name);
// anything else is refused, never updated.
//
// Callers serialise changes (the plugin holds its node lock).
package hookmap
