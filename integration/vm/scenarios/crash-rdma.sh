#!/bin/sh
# crash-rdma (own boot, with a second NIC and rc.simrdma=eth0): crash safety
# of exclusive mode on the kernel's real RDMA core, checked in Go by the
# crash matrix's test binary (integration/vm/crash: what it runs and
# checks). Each of its cases is a check here; the matrix passes only if
# the binary ran in this guest and every case ran and passed.
. /scenarios/lib.sh

out=$(RC_VM_GUEST=1 /usr/local/bin/crash.test -test.v -test.count=1 -test.run '^TestCrashMatrix$' -test.timeout 20m 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
# One check per case, from go test's own result lines.
echo "$out" | sed -En 's/^ *--- (PASS|FAIL): TestCrashMatrix\/([^ ]*) .*/\1 \2/p' | while read -r res name; do
	step "$name"
	if [ "$res" = PASS ]; then pass; else fail "see the test's log above"; fi
done
echo "$out" | grep -E 'crash_test.go:[0-9]+: (crash matrix|ADD failpoints|DEL failpoints):' | sed 's/^ *crash_test.go:[0-9]*: //' | while read -r l; do info "crash-rdma: $l"; done
step matrix
if [ $rc = 0 ] && echo "$out" | grep -q '^--- PASS: TestCrashMatrix '; then pass; else fail "crash.test exit $rc: $(echo "$out" | tail -n 5)"; fi
exit 0
