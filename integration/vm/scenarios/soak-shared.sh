#!/bin/sh
# soak-shared (own boot, soft-RoCE rxe0): the bounded soak in shared mode,
# checked in Go by the soak's test binary (integration/vm/soak,
# TestSoakShared: what it runs and checks). rc.soak=N pod cycles (default
# 50) of ADD and DEL, netns deaths and ADDs killed at a failpoint, beside
# STATUS, reconcile and a pod-resources socket that goes away; the node
# equal to its reading every 100 cycles and reconcile flat. Each of its
# checks is a check here and its figures RC-INFO lines; the scenario passes
# only if the binary ran in this guest and every check ran and passed
# (go_checks). The time limit is make soak's (its 2000 cycles take hours
# under TCG), below its boot's, so that a hung soak ends with the test's
# own report rather than qemu killed.
. /scenarios/lib.sh
go_checks soak.test TestSoakShared 170m
exit 0
