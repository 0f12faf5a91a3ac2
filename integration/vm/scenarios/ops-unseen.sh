#!/bin/sh
# ops-unseen: shared mode on soft-RoCE; a pod's sandbox listed ready by a
# CRI server while `rdma-chain-ops reconcile --interval` runs in a mount
# namespace whose netns directory is an empty tmpfs: nothing released
# over three passes (record, lease, child, GID kept), a problem in every
# pass, said once; the pod's DEL then releases it: checked in Go by the
# scenario's test binary (integration/vm/ops, TestOpsUnseen). Each of its
# checks is a check here; the scenario passes only if the binary ran in
# this guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOpsUnseen 5m
exit 0
