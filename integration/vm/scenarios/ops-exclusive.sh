#!/bin/sh
# ops-exclusive (own boot, with a second NIC and rc.simrdma=eth0): inspect
# and reconcile in exclusive mode with the movable simrdma0 device bound to
# the virtio-net NIC eth0. A pod gets the NIC (as rdma0) and the device;
# `inspect` shows the attachment healthy and `inspect --netns` the pod's
# rdma0 with its GIDs as the pod netns sees them; the pod netns is then
# deleted behind the plugin's back (the kernel returns both to init_net)
# and `reconcile --once` without CRI releases the attachment: the NIC is
# eth0 again as it was (addresses, MTU, routes), simrdma0 on it, the
# record and lease gone. Checked in Go by the scenario's test binary
# (integration/vm/ops, TestOpsExclusive), which runs
# /usr/local/bin/rdma-chain-ops and logs each command's output (RC-INFO
# lines here); every check of it is a check here (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOpsExclusive 5m
exit 0
