#!/bin/sh
# upgrade-shared (shared-mode boot, soft-RoCE rxe0 on veth0): the upgrade
# matrix in shared mode, an ipvlan child per pod: the newest release's
# plugin and this tree's attach, check, delete and collect each other's
# pods, and the node comes back exactly: checked in Go by the scenario's
# test binary (integration/vm/upgrade, TestUpgradeShared). Each of its
# checks is a check here; the scenario passes only if the binary ran in
# this guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks upgrade.test TestUpgradeShared 5m
exit 0
