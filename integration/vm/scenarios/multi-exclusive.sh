#!/bin/sh
# multi-exclusive (own boot, four NICs, rc.simrdma=eth0,eth1,eth2,eth3):
# exclusive mode with four movable test devices simrdma0..simrdma3, one on
# each virtio-net NIC, each NIC with its own /64, checked in Go by the
# scenario's test binary (integration/vm/exclusive, TestMultiExclusive): the
# fake kubelet allocates all four to one pod, ADD moves the four NICs
# (rdma0..rdma3) and devices into it, each interface with its IPv6 from
# podIPv6Block in its NIC's /64 and a GID of its own device in the pod; DEL
# gives all four NICs and devices back to init_net as they were, with no
# record or lease left. Each of its checks is a check here (go_checks).
. /scenarios/lib.sh
go_checks exclusive.test TestMultiExclusive 5m
exit 0
