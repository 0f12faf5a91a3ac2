#!/bin/sh
# multi: four RDMA devices per pod in shared mode with one conflist for
# every node (rxe10..rxe13 on mn0..mn3, each with its own /64): four ipvlan
# children per pod, each address a GID of its own device only, rping over
# each device, DEL releasing all four children and leases: checked in Go
# by the scenario's test binary (integration/vm/lingjun, TestMulti). Each
# of its checks is a check here; the scenario passes only if the binary
# ran in this guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks lingjun.test TestMulti 5m
exit 0
