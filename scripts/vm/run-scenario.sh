#!/usr/bin/env bash
# Boots one test VM and prints its console, for humans and demos.
#
#   scripts/vm/run-scenario.sh KERNEL SCENARIO[,SCENARIO...]
#
# KERNEL: 6.1, 6.12 or 7.3 (docs/kernels.md). SCENARIO: a script name under integration/vm/scenarios
# (smoke, shared, podres, ipv6, smc, bond, multi, exclusive, exclusive-rdma, bond-exclusive,
# multi-exclusive (four NICs), ops, ops-exclusive, ops-repair, smc-hook, crash-rdma,
# upgrade-shared, upgrade-exclusive, soak-shared, soak-exclusive, caps; opt-in: demo); several share one
# boot when joined by commas (exclusive and exclusive-rdma need their own boots). A boot with
# exclusive-rdma gets a second NIC (virtio-net, qemu user networking with restrict=on: nothing
# leaves qemu) and the simrdma test module bound to it (rc.simrdma=eth0). Steps: prepare.sh (cached), build the
# static binaries and the Go tests the guest runs (NAME.test), build the initramfs, boot qemu (TCG) with a hard timeout
# (VM_TIMEOUT, default 180 s). VM_APPEND adds kernel command line words
# (rc.load=optional also loads xfrm_user and nfnetlink). Exit status 0 only on "RC-RESULT pass".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 6.1|6.12|7.3 SCENARIO[,SCENARIO...]" >&2; exit 2; }
KERNEL=$1 SCEN=$2
TIMEOUT=${VM_TIMEOUT:-180}
export PATH="/usr/local/go/bin:$PATH"

# Only the kernel this boot needs, and the test module only for the
# scenarios that bind it.
SIMRDMA=0
case ",$SCEN," in *,exclusive-rdma,* | *,bond-exclusive,* | *,ops-exclusive,* | *,ops-repair,* | *,crash-rdma,* | \
	*,upgrade-exclusive,* | *,soak-exclusive,* | *,multi-exclusive,* | *,caps,*) SIMRDMA=1 ;;
esac
VM_KERNELS=$KERNEL VM_SIMRDMA=$SIMRDMA "$ROOT/scripts/vm/prepare.sh" >/dev/null
ENV="$ROOT/.cache/vm/env"
key="KERNEL_${KERNEL//./_}"
KDIR=$(awk -F= -v k="$key" '$1==k {print $2}' "$ENV")
[ -n "$KDIR" ] || { echo "unknown kernel $KERNEL (6.1, 6.12 or 7.3)" >&2; exit 2; }
QEMU=$(awk -F= '$1=="QEMU" {print $2}' "$ENV")
SIMRDMA_KO=$(awk -F= -v k="SIMRDMA_${KERNEL//./_}" '$1==k {print $2}' "$ENV")
NIC=()
case ",$SCEN," in
*,exclusive-rdma,* | *,bond-exclusive,* | *,ops-exclusive,* | *,ops-repair,* | *,crash-rdma,* | *,upgrade-exclusive,* | *,soak-exclusive,* | *,caps,*)
	[ -n "$SIMRDMA_KO" ] || { echo "no simrdma module for $KERNEL in $ENV (see scripts/vm/prepare.sh output)" >&2; exit 1; }
	NIC=(-netdev user,id=n1,restrict=on,ipv6=off -device virtio-net-pci,netdev=n1)
	VM_APPEND="rc.simrdma=eth0 ${VM_APPEND:-}"
	;;
*,multi-exclusive,*)
	[ -n "$SIMRDMA_KO" ] || { echo "no simrdma module for $KERNEL in $ENV (see scripts/vm/prepare.sh output)" >&2; exit 1; }
	for i in 0 1 2 3; do NIC+=(-netdev "user,id=n$i,restrict=on,ipv6=off" -device "virtio-net-pci,netdev=n$i"); done
	VM_APPEND="rc.simrdma=eth0,eth1,eth2,eth3 ${VM_APPEND:-}"
	;;
esac

[ -x "$ROOT/.tools/bin/cnitool" ] && [ -x "$ROOT/.tools/cni/bin/ptp" ] || "$ROOT/scripts/deps.sh"

WORK="${VM_WORK:-$ROOT/.cache/vm/run}" # VM_WORK: a run of its own beside another
BIN="$WORK/bin"
mkdir -p "$BIN"
cd "$ROOT"
export CGO_ENABLED=0
go build -trimpath -ldflags '-s -w' -o "$BIN/fakekubelet" ./integration/vm/guest/fakekubelet
go build -trimpath -ldflags '-s -w' -o "$BIN/smcctl" ./integration/vm/guest/smcctl
go build -trimpath -ldflags '-s -w' -o "$BIN/tcpproto" ./integration/vm/guest/tcpproto
go build -trimpath -ldflags '-s -w' -o "$BIN/kcaps" ./integration/vm/guest/kcaps
go test -c -trimpath -tags smchook -ldflags '-s -w' -o "$BIN/hook.test" ./pkg/smc/hook/
go test -c -trimpath -ldflags '-s -w' -o "$BIN/netdev.test" ./pkg/netdev/
# The scenarios that are Go tests run in the guest (vm_test.go's guestTests).
for g in crash exclusive shared smcr lingjun soak ops upgrade caps; do
	go test -c -trimpath -ldflags '-s -w' -o "$BIN/$g.test" ./integration/vm/$g/
done
go build -trimpath -tags failpoint -ldflags '-s -w' -o "$BIN/rdma-chain-fp" ./plugins/meta/rdma-chain
# The binaries built beside the plugin (the SMC socket hook, which the plugin
# runs from its own directory; the operator binary): the ones beside
# RC_VM_PLUGIN, else built from source.
for b in rdma-chain-smc-hook:./cmd/rdma-chain-smc-hook rdma-chain-ops:./cmd/rdma-chain-ops; do
	if [ -n "${RC_VM_PLUGIN:-}" ] && [ -x "$(dirname "$RC_VM_PLUGIN")/${b%%:*}" ]; then
		cp "$(dirname "$RC_VM_PLUGIN")/${b%%:*}" "$BIN/${b%%:*}"
	else
		go build -trimpath -ldflags '-s -w' -o "$BIN/${b%%:*}" "${b#*:}"
	fi
done
if [ -n "${RC_VM_PLUGIN:-}" ]; then
	cp "$RC_VM_PLUGIN" "$BIN/rdma-chain"
elif [ -d "$ROOT/plugins/meta/rdma-chain" ]; then
	go build -trimpath -ldflags '-s -w' -o "$BIN/rdma-chain" ./plugins/meta/rdma-chain
elif [ -x "$ROOT/bin/rdma-chain" ]; then
	cp "$ROOT/bin/rdma-chain" "$BIN/rdma-chain"
else
	echo "note: plugins/meta/rdma-chain does not exist yet; only plugin-free scenarios (smoke) can pass" >&2
	rm -f "$BIN/rdma-chain"
fi

# The upgrade scenarios also boot the plugin of the newest release
# (docs/releases.md's last row, built from its commit).
rm -f "$BIN/rdma-chain-old"
case ",$SCEN," in *,upgrade-*)
	REL=$(grep -E '^\| v[0-9]' "$ROOT/docs/releases.md" | tail -1)
	UPVER=$(echo "$REL" | awk -F' \\| ' '{print substr($1, 3)}')
	UPFROM=$(echo "$REL" | awk -F' \\| ' '{print $2}')
	OLDSRC=$(mktemp -d)
	(set -o pipefail; git -C "$ROOT" archive --format=tar "$UPFROM" | tar -x -C "$OLDSRC") &&
		(cd "$OLDSRC" && go build -trimpath -ldflags "-s -w -X main.buildVersion=$UPVER" -o "$BIN/rdma-chain-old" ./plugins/meta/rdma-chain)
	rc=$?
	rm -rf "$OLDSRC"
	[ $rc = 0 ] || { echo "cannot build the plugin at $UPFROM" >&2; exit 1; }
	;;
esac
INITRD="$WORK/initrd-$KERNEL.cpio.gz"
SIMRDMA_KO="$SIMRDMA_KO" RC_BIN_DIR="$BIN" "$ROOT/scripts/vm/initramfs.sh" "$KDIR" "$INITRD" "$ROOT/integration/vm/scenarios"

LOG="$WORK/console-$KERNEL-${SCEN//,/+}.log"
echo "booting $KERNEL ($(cat "$KDIR/kver")) with rc.scenario=$SCEN; console also in $LOG" >&2
start=$(date +%s.%N)
set +e
timeout -k 5 "$TIMEOUT" "$QEMU" -accel "${VM_ACCEL:-tcg,thread=single}" -m 1024 -smp 2 -nographic -no-reboot \
	-kernel "$KDIR/vmlinuz" -initrd "$INITRD" "${NIC[@]}" \
	-append "console=ttyS0 panic=-1 quiet no_timer_check rc.scenario=$SCEN ${VM_APPEND:-}" </dev/null 2>&1 | tr -d '\r' | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
end=$(date +%s.%N)
echo "boot wall time: $(echo "$end - $start" | bc 2>/dev/null || awk "BEGIN{print $end-$start}") s (qemu exit $rc)" >&2
[ "$rc" = 124 ] && { echo "TIMEOUT after ${TIMEOUT}s" >&2; exit 1; }
grep -q '^RC-RESULT pass' "$LOG" && ! grep -q 'RC-FAIL' "$LOG"
