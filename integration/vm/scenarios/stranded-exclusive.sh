#!/bin/sh
# stranded-exclusive: exclusive mode with simrdma0..simrdma3 on four NICs;
# two pods' netns outlive their pins (held by a process) with their
# devices; three ADDs at once all end well inside the node lock's
# timeout (two attach the free devices, one is told to try again);
# inspect reports both stranded attachments; the free devices stay
# usable; the holders' late DELs give everything back once they let go:
# checked in Go by the scenario's test binary (integration/vm/exclusive,
# TestStrandedExclusive). Each of its checks is a check here; the
# scenario passes only if the binary ran in this guest and every check
# ran and passed (go_checks).
. /scenarios/lib.sh
go_checks exclusive.test TestStrandedExclusive 5m
exit 0
