#!/bin/sh
# shared: RDMA netns mode shared, "podSelection":"all": each pod gets an
# ipvlan (L2) child of rxe0's netdev veth0, named rdma0, in its netns; the
# parent and rxe0 stay in init_net. ADD, CHECK, rping between two pods,
# DEL (twice), CHECK of a missing child (106), DEL after the netns is gone,
# at cniVersion 0.4.0 and 1.0.0: checked in Go by the scenario's test
# binary (integration/vm/shared, TestShared). Each of its checks is a check
# here; the scenario passes only if the binary ran in this guest and every
# check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks shared.test TestShared 5m
exit 0
