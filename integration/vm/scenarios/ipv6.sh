#!/bin/sh
# ipv6: shared mode with an "ipam" section for the pod-side RDMA interface
# (host-local, fd00:77::/64): rdma0's address in the pod only, the result
# without it so the whole chain's CHECK passes, its RoCE v2 GID on rxe0,
# rping over it, the leases given back by DEL (also after the netns is
# gone, and after its pin is gone while a process holds it: the child is
# deleted through the host's nsid of the netns first), at cniVersion 0.4.0, 1.0.0 and 1.1.0; then a full GID table
# refuses a pod's ADD (111) and one with room takes it: checked in Go by
# the scenario's test binary (integration/vm/shared, TestIPv6). Each of its
# checks is a check here; the scenario passes only if the binary ran in
# this guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks shared.test TestIPv6 10m
exit 0
