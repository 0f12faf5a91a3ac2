// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// smc_hook turns the TCP sockets of listed network namespaces into SMC
// sockets as they are created: an fmod_ret program on the kernel's
// update_socket_protocol() hook (Linux >= 6.6) returns IPPROTO_SMC
// (Linux >= 6.11) for socket(AF_INET, SOCK_STREAM, 0 or IPPROTO_TCP) when
// the calling task's netns is in smc_netns. Every socket() on the node
// passes through it, so the common path is one compare of family and type,
// then one map lookup; everything else returns the protocol unchanged.
// AF_INET6 is left alone: SMC-R does no IPv6.
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define SOCK_STREAM 1
#define SOCK_TYPE_MASK 0xf
#define IPPROTO_TCP 6
#define IPPROTO_SMC 256

// The few kernel types the program reads, relocated by CO-RE against the
// running kernel's BTF.
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

struct nsproxy {
	struct net *net_ns;
} __attribute__((preserve_access_index));

struct task_struct {
	struct nsproxy *nsproxy;
} __attribute__((preserve_access_index));

// smc_netns: netns inode number -> 1, for the annotated pods' netns.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} smc_netns SEC(".maps");

SEC("fmod_ret/update_socket_protocol")
int BPF_PROG(smc_socket_protocol, int family, int type, int protocol)
{
	if (family != AF_INET || (type & SOCK_TYPE_MASK) != SOCK_STREAM ||
	    (protocol != 0 && protocol != IPPROTO_TCP))
		return protocol;
	// A BTF pointer: the loads below are plain (fault-safe) loads the JIT
	// inlines, not bpf_probe_read_kernel() calls.
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 inum = task->nsproxy->net_ns->ns.inum;
	if (bpf_map_lookup_elem(&smc_netns, &inum))
		return IPPROTO_SMC;
	return protocol;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
