#!/usr/bin/env bash
# The `make demo` story: boots one test VM (Debian 6.12 kernel, soft-RoCE,
# qemu TCG) with the scenario integration/vm/scenarios/demo.sh and prints the
# lines the guest marks with "DEMO " (prefix stripped). Everything else is
# hidden unless the run fails; then the whole console is printed and the exit
# status is 1.
#
# Steps (all cached where they can be): scripts/vm/prepare.sh (kernels and
# guest userland under .cache/vm), the static binaries (rdma-chain from
# plugins/meta/rdma-chain, or RC_VM_PLUGIN; the guest tools), the initramfs,
# one boot (VM_TIMEOUT, default 180 s). DEMO_KERNEL=6.1 uses the 6.1 kernel.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KERNEL=${DEMO_KERNEL:-6.12}
LOG=$(mktemp /tmp/rdma-chain-demo.XXXXXX)
trap 'rm -f "$LOG"' EXIT
start=$(date +%s.%N)

echo "rdma-chain demo: preparing and booting a Debian $KERNEL kernel with soft-RoCE under qemu (TCG)..."
"$ROOT/scripts/vm/run-scenario.sh" "$KERNEL" demo >"$LOG" 2>&1
rc=$?
end=$(date +%s.%N)
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')

tr -d '\r' <"$LOG" | sed -n 's/^DEMO //p; s/^DEMO$//p'
checks=$(grep -c '^RC-PASS demo/' "$LOG")
fails=$(grep -c '^RC-FAIL' "$LOG")
if [ "$rc" -ne 0 ] || [ "$fails" -ne 0 ] || ! grep -q '^RC-RESULT pass' "$LOG" || [ "$checks" -eq 0 ]; then
	echo
	echo "rdma-chain demo FAILED (exit $rc, $fails failed checks); the whole console:"
	cat "$LOG"
	echo "demo wall time: ${wall}s"
	exit 1
fi
boot=$(sed -n 's/^boot wall time: \([0-9.]*\) s.*/\1/p' "$LOG" | tail -n1)
echo
printf 'demo: %d checks passed; VM boot + story %.1fs, wall time %ss\n' "$checks" "${boot:-0}" "$wall"
