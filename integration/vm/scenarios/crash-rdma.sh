#!/bin/sh
# crash-rdma (own boot, with a second NIC and rc.simrdma=eth0): crash safety
# of exclusive mode on the kernel's real RDMA core, checked in Go by the
# crash matrix's test binary (integration/vm/crash: what it runs and
# checks). Each of its cases is a check here; the matrix passes only if
# the binary ran in this guest and every case ran and passed (go_checks).
. /scenarios/lib.sh
go_checks crash.test TestCrashMatrix 20m
exit 0
