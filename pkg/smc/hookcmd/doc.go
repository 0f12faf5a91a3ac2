// Package hookcmd runs the transparent-SMC socket hook (pkg/smc/hook) in its
// own binary, rdma-chain-smc-hook, installed beside the plugin.
//
// The loader is a binary of its own because it links cilium/ebpf, whose
// packages (with debug/elf, compress/*, encoding/xml and go/parser behind
// them) would cost every start of the plugin binary CPU time
// (docs/performance.md), on every verb of every pod, while only SMC-R pods with smcr.transparent bpf or auto
// on a kernel >= 6.6 ever use the hook. Of those, only the pod whose ADD
// loads the node's program and the one whose DEL detaches it pay an exec;
// the others' netns are listed and unlisted in the pinned map with raw
// bpf(2) calls (Client, pkg/smc/hookmap).
package hookcmd
