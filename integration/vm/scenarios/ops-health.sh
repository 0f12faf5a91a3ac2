#!/bin/sh
# ops-health: NIC health in reconcile's metrics on soft-RoCE (shared
# mode): `rdma-chain-ops reconcile --interval --metrics-bind-address`
# serves rxe0 port 1's GID table (rows and used rows, as sysfs has them
# when read in the guest), rate and state; rxe0's netdev set down flips
# the port's state in the scrape to DOWN, and set up back to ACTIVE.
# Checked in Go by the scenario's test binary (integration/vm/ops,
# TestOpsHealth); each of its checks is a check here (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOpsHealth 5m
exit 0
