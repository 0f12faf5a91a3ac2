#!/bin/sh
# caps (own boot, with a second NIC and rc.simrdma=eth0): what this kernel
# offers the plugin, probed in Go by the scenario's test binary
# (integration/vm/caps, TestCaps: kcaps' SMC and netns-local keys, the
# RDMA netns mode switch and device moves, the transparent-SMC mechanism
# STATUS, inspect and the metrics name, the socket hook held by reconcile
# exactly where that is the mechanism). Each of its checks is a check
# here; then its "RC-CAP KEY VALUE" lines, which integration/vm/vm_test.go
# compares with the kernel's row of the table in docs/kernels.md (a test
# that stopped early leaves keys missing, which fails there).
. /scenarios/lib.sh
go_checks caps.test TestCaps 5m
cat /run/rc-caps 2>/dev/null
exit 0
