// Package hook switches the TCP sockets of listed network namespaces to SMC
// without changing the application and without a daemon: one BPF fmod_ret
// program on the kernel's update_socket_protocol() (Linux >= 6.6) returns
// IPPROTO_SMC (Linux >= 6.11) for AF_INET stream sockets created in a netns
// listed in a map. The program is loaded and attached once per node, and
// the link and the map are pinned in bpffs, so every later plugin call only
// opens the pinned map, adds or removes a netns, and exits. The last netns
// removed detaches the program and removes the pins, unless the program is
// held (Hold: the reconcile daemon keeps it loaded for the pods to come).
//
// Callers serialise Add and Remove (the plugin holds its node lock).
package hook
