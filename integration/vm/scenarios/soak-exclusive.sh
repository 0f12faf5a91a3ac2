#!/bin/sh
# soak-exclusive (own boot, rc.simrdma=eth0): the bounded soak in exclusive
# mode on the kernel's real RDMA core (simrdma0 moved with eth0), checked
# in Go by the soak's test binary (integration/vm/soak, TestSoakExclusive:
# what it runs and checks). rc.soak=N pod cycles (default 50) of ADD and
# DEL, netns deaths and ADDs killed at a failpoint, beside STATUS,
# reconcile and a pod-resources socket that goes away; the node equal to
# its reading every 100 cycles and reconcile flat. Each of its checks is a
# check here and its figures RC-INFO lines; the scenario passes only if the
# binary ran in this guest and every check ran and passed (go_checks). The
# time limit is make soak's, below its boot's (soak-shared.sh says why).
. /scenarios/lib.sh
go_checks soak.test TestSoakExclusive 170m
exit 0
