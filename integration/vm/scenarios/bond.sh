#!/bin/sh
# bond: shared mode on a bonded RDMA netdev, as Lingjun nodes have it:
# soft-RoCE rxe1 on an active-backup bond0, two pods with ipvlan children
# of the bond and IPv6 from podIPv6Block, their GIDs on rxe1, rping between
# them, DEL giving everything back, then pkg/netdev's host link lookup
# tests with bonds: checked in Go by the scenario's test binary
# (integration/vm/lingjun, TestBond). Each of its checks is a check here;
# the scenario passes only if the binary ran in this guest and every check
# ran and passed (go_checks).
. /scenarios/lib.sh
go_checks lingjun.test TestBond 5m
exit 0
