#!/bin/sh
# upgrade-exclusive (own boot, second NIC, rc.simrdma=eth0): the upgrade
# matrix of upgrade.sh in exclusive mode on the kernel's real RDMA core.
. /scenarios/lib.sh
MODE=exclusive
. /scenarios/upgrade.sh
