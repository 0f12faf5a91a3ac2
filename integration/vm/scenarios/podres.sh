#!/bin/sh
# podres: "podSelection":"requested" against a fake kubelet serving the
# pod-resources API: a pod with rdma/hca gets rdma0, one without passes
# through, a dead or missing kubelet socket fails ADD with 11, at
# cniVersion 0.4.0 and 1.0.0; DRA claims of the served driver, of another
# driver (dranet) alone, and with a device-plugin allocation (103): checked
# in Go by the scenario's test binary (integration/vm/shared,
# TestPodResources). Each of its checks is a check here; the scenario
# passes only if the binary ran in this guest and every check ran and
# passed (go_checks).
. /scenarios/lib.sh
go_checks shared.test TestPodResources 5m
exit 0
