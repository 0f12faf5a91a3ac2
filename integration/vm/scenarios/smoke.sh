#!/bin/sh
# smoke: the VM itself works, no plugin: modules loaded, soft-RoCE rxe0 on
# veth0, a netns mode, a non-empty GID table, netns + ipvlan, the tools,
# rping over rxe0: checked in Go by the shared-mode test binary
# (integration/vm/shared, TestSmoke). Each of its checks is a check here;
# the scenario passes only if the binary ran in this guest and every check
# ran and passed (go_checks).
. /scenarios/lib.sh
go_checks shared.test TestSmoke 2m
exit 0
