#!/bin/sh
# ops-usage: per-pod RDMA usage on a shared-mode node with soft-RoCE. Two
# pods (ipvlan children of rxe0's netdev); `reconcile --metrics-pod-labels`
# serves the metrics; while rping and then perftest's ib_send_bw run
# between the pods, each pod's QPs, CQs, MRs, PDs and MR bytes show in the
# scrape and in `inspect --json`, and after the pods' DEL no series names
# them; the RES dumps' pids and their pid-namespace filter are measured on
# the way: checked in Go by integration/vm/ops's TestOpsUsage (go_checks).
. /scenarios/lib.sh
go_checks ops.test TestOpsUsage 5m
exit 0
