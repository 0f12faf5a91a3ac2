#!/bin/sh
# upgrade-exclusive (own boot, simrdma0 on the virtio NIC eth0): the
# upgrade matrix in exclusive mode: the newest release's plugin and this
# tree's attach, check, delete and collect each other's pods, and the node
# comes back exactly: checked in Go by the scenario's test binary
# (integration/vm/upgrade, TestUpgradeExclusive). Each of its checks is a
# check here; the scenario passes only if the binary ran in this guest and
# every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks upgrade.test TestUpgradeExclusive 5m
exit 0
