#!/bin/sh
# bond-exclusive (in the simrdma boot, after exclusive-rdma): exclusive mode
# with the movable test device simrdma0 bound to bond1, an active-backup
# bond of two links, then to one of its slaves while the bond carries the
# node's default route, checked in Go by the scenario's test binary
# (integration/vm/exclusive, TestBondExclusive): ADD refused with 102 (the
# bond cannot leave init_net) or 110 (the node's uplink), nothing recorded
# or moved, the bond and its slaves untouched, DEL with nothing to give
# back; simrdma reloaded on eth0 afterwards. Each of its checks is a check
# here (go_checks).
. /scenarios/lib.sh
go_checks exclusive.test TestBondExclusive 5m
exit 0
