#!/bin/sh
# ops-repair (the ops-exclusive boot: a second NIC and rc.simrdma=eth0):
# `rdma-chain-ops reconcile --interval 10m --metrics-bind-address` runs in
# the background and finds the network itself (NETCONFPATH). A pod gets the
# NIC (as rdma0) and simrdma0; the metrics are scraped over HTTP and parsed
# with the Prometheus text parser; the pod netns is deleted without DEL and
# the time until the NIC is back as eth0 with its addresses and the device
# on it is measured and printed (RC-INFO repair-time; the goal, 5 s under
# TCG, is a number to read, not an assertion: it moves with the machine's
# load). That the repair came from the kernel's event, not from a pass, is
# asserted: rdma_chain_repairs_total{trigger="event"}. Checked in Go by the
# scenario's test binary (integration/vm/ops, TestOpsRepair); every check
# of it is a check here (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOpsRepair 5m
exit 0
