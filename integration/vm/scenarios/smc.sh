#!/bin/sh
# smc: SMC-R pnet table for pods annotated network.alibabacloud.com/erdma-smcr,
# on soft-RoCE rxe0 (netdev veth0), checked in Go by the scenario's test
# binary (integration/vm/smcr): an annotated pod gets {PNETID, rxe0, port 1}
# in init_net and {PNETID, eth0} in its netns (PNETID: veth0's MAC), other
# pods none; smcr.ueid in the UEID table; AF_SMC between two annotated pods
# over IPv4 and IPv6 with the fallback counters read (docs/kernels.md's
# "SMC-R and IPv6", its RC-SMCR lines); DEL removes the pod entry, and the
# init_net entry with the last annotated pod. On a kernel without SMC
# (Debian's 7.3): what smcr.onUnsupported documents, warn and fail. Each of its checks is a check here; the scenario
# passes only if the binary ran in this guest and every check ran and
# passed (go_checks).
. /scenarios/lib.sh
go_checks smcr.test TestSMC 10m
exit 0
