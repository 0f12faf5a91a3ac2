#!/bin/sh
# crash-softroce: the crash matrix of podSoftRoCE (shared mode, veth1):
# on 7.3 a -tags failpoint build killed after each host change of ADD and
# DEL (the macvlan child, the pod's own rxe device, the lease), then DEL or
# GC, and the node (its RDMA devices included) equals its reading from
# before; on 6.1 and 6.12 ADD is refused (112) before any host change.
# Checked in Go (integration/vm/crash, TestCrashMatrixSoftRoCE) through
# go_checks.
. /scenarios/lib.sh
go_checks crash.test TestCrashMatrixSoftRoCE 15m
exit 0
