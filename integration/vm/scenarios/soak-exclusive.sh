#!/bin/sh
# soak-exclusive (own boot, rc.simrdma=eth0): soak.sh in exclusive mode on
# the kernel's real RDMA core.
. /scenarios/lib.sh
MODE=exclusive
. /scenarios/soak.sh
