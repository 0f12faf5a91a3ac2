#!/bin/sh
# exclusive-rdma (own boot, with a second NIC and rc.simrdma=eth0): exclusive
# mode on the kernel's real RDMA core, checked in Go by the scenario's test
# binary (integration/vm/exclusive: what it runs and checks, for cniVersion
# 0.4.0, 1.0.0 and 1.1.0). Each of its checks is a check here; the scenario
# passes only if the binary ran in this guest and every check ran and
# passed (go_checks).
. /scenarios/lib.sh
go_checks exclusive.test TestExclusiveRDMA 15m
exit 0
