#!/usr/bin/env bash
# Boots the node tier's guest and prints its console (integration/node's test
# runs this; humans can too).
#
#   scripts/node/run.sh [PODS_DIR]
#
# PODS_DIR: pod manifests, each with the annotation test.rdma-chain/expect
# (integration/node/guest/pods.sh says what each check means; default
# integration/node/pods). A PODS_DIR with subdirectories shared/ and
# exclusive/ boots the node once per subdirectory, in that RDMA netns mode;
# one without boots it once in shared mode. NODE_KERNEL: 6.12 (default) or
# 6.1. Needs: scripts/vm/prepare.sh's cache (the Debian kernel with its
# simrdma module, qemu, the guest userland), scripts/node/parts.sh's
# (kubelet, the RDMA device plugin, containerd 2.4.2, runc) and make image's
# bin/rdma-chain-image.tar. Builds, under .cache/node/run/: the guest's
# helpers (nodectl, pause), the pause and test images, the static pod derived
# from conf/daemonset.yaml, and an initramfs in two parts: the VM tier's
# (scripts/vm/initramfs.sh: userland, modules, CNI plugins, /init from
# integration/node/guest) and the node's (kubelet, containerd, runc, the
# device plugin, overlay.ko, images, configs, pods), concatenated (the kernel
# unpacks each), plus /pods per boot. Boots qemu (TCG, 4 GiB, a virtio-net NIC
# on user networking with restrict=on: nothing leaves qemu; exclusive mode
# adds a second one) with a hard timeout per boot (NODE_TIMEOUT, default
# 1500 s). no_timer_check: on a starved host the kernel's IO-APIC timer check
# fails under TCG and panics ("IO-APIC + timer doesn't work", seen here with
# five VMs on two cores). thread=single: with one host thread per vCPU
# (multi-threaded TCG) a vCPU ran code the other was patching (an int3 oops in
# kmem_cache_alloc, seen here on the first boot with the device plugin); one
# thread for both vCPUs also leaves the host's second core to other work.
# The boots run side by side, each once it holds one of the VM slots that
# every qemu-booting tier shares (scripts/vm/slot.sh: one guest per core).
# Exit status 0 only when every boot printed "RC-RESULT pass" and no RC-FAIL.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PODS=$(cd "${1:-$ROOT/integration/node/pods}" && pwd)
# OWN_PODS=1: the project's own pods (no PODS_DIR), with the node's own
# checks around them (init.sh's rc.ownpods).
OWN_PODS=0
[ -n "${1:-}" ] || OWN_PODS=1
MODES=
for m in shared exclusive; do
	[ -d "$PODS/$m" ] && MODES="$MODES $m"
done
TIMEOUT=${NODE_TIMEOUT:-1500}
export PATH="/usr/local/go/bin:$PATH"
die() { echo "node-run: ERROR: $*" >&2; exit 1; }
# shellcheck source=scripts/node/stage.sh
. "$ROOT/scripts/node/stage.sh"
# shellcheck source=scripts/vm/slot.sh
. "$ROOT/scripts/vm/slot.sh"
envval() { awk -F= -v k="$2" '$1==k {print substr($0, length(k) + 2)}' "$1"; }

VMENV="$ROOT/.cache/vm/env"
PARTS="$ROOT/.cache/node/parts.env"
IMAGE="$ROOT/bin/rdma-chain-image.tar"
[ -f "$VMENV" ] || die "$VMENV missing: run scripts/vm/prepare.sh"
[ -f "$PARTS" ] || die "$PARTS missing: run scripts/node/parts.sh"
[ -f "$IMAGE" ] || die "$IMAGE missing: run make image"
QEMU=$(envval "$VMENV" QEMU)
ROOTFS=$(envval "$VMENV" ROOTFS)
case "${NODE_KERNEL:=6.12}" in 6.12 | 6.1) ;; *) die "NODE_KERNEL=$NODE_KERNEL: 6.12 or 6.1" ;; esac
KDIR=$(envval "$VMENV" "KERNEL_${NODE_KERNEL/./_}")
[ -n "$KDIR" ] || die "no $NODE_KERNEL kernel in $VMENV: run scripts/vm/prepare.sh"
KVER=$(cat "$KDIR/kver")
SIMRDMA=$(envval "$VMENV" "SIMRDMA_${NODE_KERNEL/./_}")
[ -f "$SIMRDMA" ] || die "no simrdma module for $KVER in $VMENV: run scripts/vm/prepare.sh"
KUBELET=$(envval "$PARTS" KUBELET)
RDMA_DP=$(envval "$PARTS" RDMA_DP)
CTRD=$(envval "$PARTS" CONTAINERD_DIR)
RUNC=$(envval "$PARTS" RUNC)
for f in "$QEMU" "$KUBELET" "$RDMA_DP" "$CTRD/containerd" "$CTRD/containerd-shim-runc-v2" "$CTRD/ctr" "$RUNC"; do
	[ -x "$f" ] || die "$f missing (scripts/vm/prepare.sh, scripts/node/parts.sh)"
done

WORK="$ROOT/.cache/node/run"
rm -rf "$WORK"
mkdir -p "$WORK/bin" "$WORK/images" "$WORK/stage"
cd "$ROOT"
export CGO_ENABLED=0
go build -trimpath -ldflags '-s -w' -o "$WORK/bin/nodectl" ./integration/node/guest/nodectl
go build -trimpath -ldflags '-s -w' -o "$WORK/bin/smcctl" ./integration/vm/guest/smcctl
build_node_images

# Part one: the VM tier's initramfs with the node's /init.
CNI_BIN_DIR="$ROOT/.tools/cni/bin" RC_BIN_DIR="$WORK/bin" SIMRDMA_KO="$SIMRDMA" "$ROOT/scripts/vm/initramfs.sh" "$KDIR" "$WORK/base.cpio.gz" \
	"$ROOT/integration/vm/scenarios" "$ROOT/integration/node/guest"

# Part two: the node.
S="$WORK/stage"
mkdir -p "$S/usr/local/bin" "$S/usr/sbin" "$S/images" "$S/pods" "$S/etc/node" "$S/etc/kubernetes/manifests" "$S/lib/modules/$KVER"
cp -a "$ROOT/integration/node/guest/etc/." "$S/etc/"
stage_node_parts "$S"
stage_overlay "$S" "$KDIR" "$KVER"
# The DaemonSet as an operator sets it up for the node's mode (its --set,
# integration/node/guest/etc/node/install-set-MODE.json; docs/lingjun.md):
# each pod's IPv6 on rdma0 from a block of the node NIC's /64.
for m in shared exclusive; do
	go run ./integration/node/staticpod -install-set "$(cat "$ROOT/integration/node/guest/etc/node/install-set-$m.json")" \
		conf/daemonset.yaml >"$S/etc/node/rdma-chain-$m.yaml"
done
rmdir "$S/pods"
(cd "$S" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >"$WORK/node.cpio.gz")
rm -rf "$S"

# boot MODE DIR: the node in MODE with the pods of DIR (part three, /pods),
# once one of the VM slots every qemu-booting tier shares is free
# (scripts/vm/slot.sh); its console goes to console-MODE.log.
boot() {
	local mode=$1 dir=$2 log="$WORK/console-$1.log" stage="$WORK/pods-stage-$1" start end rc cpu nic=()
	# The log exists before any step that may fail: boot runs in the
	# background, where errexit ends it at the first failure.
	: >"$log"
	rm -rf "$stage" && mkdir -p "$stage/pods"
	cp "$dir"/*.yaml "$stage/pods/"
	(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >"$WORK/pods-$mode.cpio.gz")
	cat "$WORK/base.cpio.gz" "$WORK/node.cpio.gz" "$WORK/pods-$mode.cpio.gz" >"$WORK/initrd-$mode.cpio.gz"
	echo "node-run: initramfs $(du -h "$WORK/initrd-$mode.cpio.gz" | cut -f1), kernel $KVER, $mode node, pods from $dir" >>"$log"
	# Exclusive: a second NIC (eth1) for the pods to take in turn.
	[ "$mode" = exclusive ] && nic=(-netdev user,id=n1,restrict=on,ipv6=off -device virtio-net-pci,netdev=n1)
	slot_acquire 2>>"$log" || return 1
	start=$(date +%s.%N)
	set +e
	timeout -k 5 "$TIMEOUT" "$QEMU" -accel tcg,thread=single -m 4096 -smp 2 -nographic -no-reboot \
		-kernel "$KDIR/vmlinuz" -initrd "$WORK/initrd-$mode.cpio.gz" \
		-netdev user,id=n0,restrict=on,ipv6=off -device virtio-net-pci,netdev=n0 "${nic[@]}" \
		-append "console=ttyS0 panic=-1 quiet no_timer_check rc.node=$mode rc.ownpods=$OWN_PODS" </dev/null 2>&1 | tr -d '\r' >>"$log"
	rc=${PIPESTATUS[0]}
	set -e
	end=$(date +%s.%N)
	slot_release
	# The boot's children's CPU time (qemu's, nearly all): against the wall
	# time, how busy the guest kept its core.
	# (times, not in a pipeline: a subshell would report its own children)
	times >"$WORK/times-$mode"
	cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }; printf "%.1f", t }' "$WORK/times-$mode")
	echo "node-run: $mode node boot wall time $(awk "BEGIN{printf \"%.1f\", $end-$start}") s, CPU $cpu s (qemu exit $rc)" >>"$log"
	[ "$rc" != 124 ] || { echo "node-run: TIMEOUT after ${TIMEOUT}s" >>"$log"; return 1; }
	grep -q '^RC-RESULT pass' "$log" && ! grep -q '^RC-FAIL' "$log"
}

# The boots run side by side, each in its own slot; their consoles are
# printed one after the other, whole, once both are done.
modes=$MODES
[ -n "$modes" ] || modes=shared
pids=()
for m in $modes; do
	dir=$PODS/$m
	[ -n "$MODES" ] || dir=$PODS
	boot "$m" "$dir" &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
for m in $modes; do
	cat "$WORK/console-$m.log" || status=1
done
exit $status
