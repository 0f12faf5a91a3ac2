#!/bin/sh
# ops: the operator commands (rdma-chain-ops) on a shared-mode node with
# soft-RoCE and SMC. validate and install on conflists; a pod with SMC-R
# (ipvlan child with IPv6 from host-local, pnet entries), a pod whose ADD
# fails (deviceID naming no offered device, code 103), a third pod;
# `inspect` and `inspect --netns` show them (text and --json); the third
# pod's netns is deleted behind the plugin's back and `reconcile --once`
# without CRI releases its attachment (record and IPv6 lease) and keeps
# the others: checked in Go by the scenario's test binary
# (integration/vm/ops, TestOps), which runs /usr/local/bin/rdma-chain-ops
# and logs each command's output (RC-INFO lines here). Each of its checks
# is a check here; the scenario passes only if the binary ran in this
# guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOps 5m
exit 0
