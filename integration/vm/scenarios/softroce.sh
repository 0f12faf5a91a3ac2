#!/bin/sh
# softroce: podSoftRoCE on veth1 (no RDMA device; rxe0 is on its peer
# veth0), RDMA netns mode shared. On 7.3 two pods get macvlan children of
# veth1 with rxe devices of their own made in their netns; rping (IPv6,
# IPv4) and ib_send_bw run between those devices; DEL deletes them;
# reconcile --once and uninstall give back pods gone without DEL; the NIC
# with an RDMA device is refused (112). On 6.1 and 6.12 ADD is refused
# (112): rdma_rxe works inside a netns only from Linux 7.1. Checked in Go
# by the scenario's test binary (integration/vm/shared, TestSoftRoCEPerPod);
# the scenario passes only if the binary ran in this guest and every check
# ran and passed (go_checks).
. /scenarios/lib.sh
go_checks shared.test TestSoftRoCEPerPod 8m
exit 0
