#!/bin/sh
# smc-hook: transparent SMC through the node's BPF socket hook
# (smcr.transparent), checked in Go by the scenario's test binary
# (integration/vm/smcr, TestSMCHook, hook*_test.go). On a kernel with
# IPPROTO_SMC (6.12): the hook's own kernel tests (pkg/smc/hook built with
# -tags smchook, /usr/local/bin/hook.test, run as a binary of its own),
# then two pods annotated network.alibabacloud.com/erdma-smcr and one plain
# pod chained after ptp; an unmodified TCP program (tcpproto: Go's net
# package, i.e. socket(AF_INET, SOCK_STREAM, 0), run in the pod's netns
# with ip netns exec) gets SMC sockets (SO_PROTOCOL 256, and SMC's own
# fallback counters move) in the annotated pods and TCP in the plain one;
# DEL unlists a pod; the last DEL detaches the program (the kernel frees
# it) and removes the pins. The first annotated pod's ADD loads the program
# (the hook binary runs), the next ones list their netns in the pinned map
# without any exec: the hook binary is moved away from then until the last
# DEL, which needs it to detach. Go >= 1.24 listens with MPTCP where the
# kernel has it (IPPROTO_MPTCP, which the hook leaves alone): the test
# logs that and runs its Go server with GODEBUG=multipathtcp=0, the knob
# such pods need. Figures (RC-INFO lines): socket()+close() with the
# program attached / detached, one run of the hook binary, the ADD of an
# annotated pod against a plain pod's (median of 9 pairs, the plugin's own
# durations from its log) and the ADD that loaded the program. On a kernel
# without IPPROTO_SMC (6.1): auto logs and goes on, bpf with onUnsupported
# fail is 108 naming what is missing. On a kernel without SMC (7.3): what
# smcr.onUnsupported documents, no pins. Each of its checks is a check
# here; the scenario passes only if the binary ran in this guest and every
# check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks smcr.test TestSMCHook 10m
exit 0
