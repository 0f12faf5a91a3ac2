#!/bin/sh
# exclusive (own boot): RDMA netns mode exclusive. Soft-RoCE (rxe) cannot
# change netns, so ADD in "mode":"exclusive" fails with CNI error 102
# naming rxe0 and leaves the node as it was; "mode":"shared" configured on
# an exclusive kernel fails with 101: checked in Go by the test binary of
# the exclusive scenarios (integration/vm/exclusive, TestSoftRoCERefused).
# Each of its checks is a check here; the scenario passes only if the
# binary ran in this guest and every check ran and passed (go_checks).
. /scenarios/lib.sh
go_checks exclusive.test TestSoftRoCERefused 5m
exit 0
