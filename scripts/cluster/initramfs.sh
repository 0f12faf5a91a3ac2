#!/usr/bin/env bash
# Builds the cluster tier's node initramfs (integration/cluster boots it):
#
#   scripts/cluster/initramfs.sh OUT_DIR
#
# OUT_DIR gets, for each kernel of CLUSTER_KERNELS (default "6.12 7.3"),
# base-K.cpio.gz (the VM tier's initramfs for kernel K: userland, modules,
# simrdma, CNI plugins, /init from integration/cluster/guest) and
# overlay-K.cpio.gz (its overlay module); node.cpio.gz (kubelet, containerd,
# runc, the RDMA device plugin, the images: pause and the test pods' (the
# nodes pull rdma-chain's from the tier's registry), the node configs); and
# env (QEMU, KERNEL_K, KVER_K).
# The test appends a last part per node (its kubeconfig); the kernel
# unpacks each. Needs scripts/vm/prepare.sh's cache (the kernels with
# simrdma) and scripts/cluster/parts.sh's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
export PATH="/usr/local/go/bin:$PATH"
die() { echo "cluster-initramfs: ERROR: $*" >&2; exit 1; }
# shellcheck source=scripts/node/stage.sh
. "$ROOT/scripts/node/stage.sh"
envval() { awk -F= -v k="$2" '$1==k {print substr($0, length(k) + 2)}' "$1"; }

VMENV="$ROOT/.cache/vm/env"
PARTS="$ROOT/.cache/cluster/parts.env"
IMAGE=
[ -f "$VMENV" ] || die "$VMENV missing: run scripts/vm/prepare.sh"
[ -f "$PARTS" ] || die "$PARTS missing: run scripts/cluster/parts.sh"
QEMU=$(envval "$VMENV" QEMU)
ROOTFS=$(envval "$VMENV" ROOTFS)
KERNELS=${CLUSTER_KERNELS:-6.12 7.3}
for K in $KERNELS; do
	KDIR=$(envval "$VMENV" "KERNEL_${K/./_}")
	[ -n "$KDIR" ] || die "no $K kernel in $VMENV: run scripts/vm/prepare.sh"
	[ -f "$(envval "$VMENV" "SIMRDMA_${K/./_}")" ] || die "no simrdma module for $K: run scripts/vm/prepare.sh"
done
KUBELET=$(envval "$PARTS" KUBELET)
RDMA_DP=$(envval "$PARTS" RDMA_DP)
CTRD=$(envval "$PARTS" CONTAINERD_DIR)
RUNC=$(envval "$PARTS" RUNC)
for f in "$QEMU" "$KUBELET" "$RDMA_DP" "$CTRD/containerd" "$CTRD/containerd-shim-runc-v2" "$CTRD/ctr" "$RUNC"; do
	[ -x "$f" ] || die "$f missing (scripts/vm/prepare.sh, scripts/cluster/parts.sh)"
done

WORK="$OUT/work"
rm -rf "$WORK"
mkdir -p "$WORK/bin" "$WORK/images" "$WORK/stage"
cd "$ROOT"
export CGO_ENABLED=0
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$WORK/bin/fwd" ./integration/cluster/fwd
# nodectl's netready: CRI NetworkReady across the same-node kubelet restart.
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$WORK/bin/nodectl" ./integration/node/guest/nodectl
build_node_images

cpio_of() { (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >"$2"); }
: >"$OUT/env.new"
for K in $KERNELS; do
	KDIR=$(envval "$VMENV" "KERNEL_${K/./_}")
	KVER=$(cat "$KDIR/kver")
	CNI_BIN_DIR="$ROOT/.tools/cni/bin" RC_BIN_DIR="$WORK/bin" SIMRDMA_KO="$(envval "$VMENV" "SIMRDMA_${K/./_}")" \
		"$ROOT/scripts/vm/initramfs.sh" "$KDIR" "$OUT/base-$K.cpio.gz" "$ROOT/integration/vm/scenarios" "$ROOT/integration/cluster/guest"
	rm -rf "$WORK/overlay-$K"
	stage_overlay "$WORK/overlay-$K" "$KDIR" "$KVER"
	cpio_of "$WORK/overlay-$K" "$OUT/overlay-$K.cpio.gz"
	printf 'KERNEL_%s=%s\nKVER_%s=%s\n' "${K/./_}" "$KDIR/vmlinuz" "${K/./_}" "$KVER" >>"$OUT/env.new"
done

S="$WORK/stage"
mkdir -p "$S/usr/local/bin" "$S/usr/sbin" "$S/images" "$S/etc"
# The node tier's runtime and device plugin configs; the cluster's kubelet.
for f in containerd rdma-dp passwd group; do
	cp -a "$ROOT/integration/node/guest/etc/$f" "$S/etc/"
done
cp -a "$ROOT/integration/cluster/guest/etc/." "$S/etc/"
stage_node_parts "$S"
cpio_of "$S" "$OUT/node.cpio.gz"
rm -rf "$WORK"
echo "QEMU=$QEMU" >>"$OUT/env.new"
mv "$OUT/env.new" "$OUT/env"
for K in $KERNELS; do
	echo "cluster-initramfs: kernel $K: $(du -h "$OUT/base-$K.cpio.gz" | cut -f1) + $(du -h "$OUT/overlay-$K.cpio.gz" | cut -f1); node part $(du -h "$OUT/node.cpio.gz" | cut -f1)" >&2
done
