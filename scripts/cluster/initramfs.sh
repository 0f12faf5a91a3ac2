#!/usr/bin/env bash
# Builds the cluster tier's node initramfs (integration/cluster boots it):
#
#   scripts/cluster/initramfs.sh OUT_DIR
#
# OUT_DIR gets base.cpio.gz (the VM tier's initramfs: userland, modules, CNI
# plugins, /init from integration/cluster/guest), node.cpio.gz (kubelet,
# containerd, runc, the RDMA device plugin, overlay.ko, the images: pause,
# the test pods' and make image's rdma-chain, the node configs) and env
# (QEMU, KERNEL, KVER). The test appends a third part per node (its
# kubeconfig); the kernel unpacks each. Needs scripts/vm/prepare.sh's cache
# (Debian 6.12 with simrdma), scripts/cluster/parts.sh's and make image's
# bin/rdma-chain-image.tar.
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
IMAGE="$ROOT/bin/rdma-chain-image.tar"
[ -f "$VMENV" ] || die "$VMENV missing: run scripts/vm/prepare.sh"
[ -f "$PARTS" ] || die "$PARTS missing: run scripts/cluster/parts.sh"
[ -f "$IMAGE" ] || die "$IMAGE missing: run make image"
QEMU=$(envval "$VMENV" QEMU)
ROOTFS=$(envval "$VMENV" ROOTFS)
KDIR=$(envval "$VMENV" KERNEL_6_12)
[ -n "$KDIR" ] || die "no 6.12 kernel in $VMENV: run scripts/vm/prepare.sh"
KVER=$(cat "$KDIR/kver")
SIMRDMA=$(envval "$VMENV" SIMRDMA_6_12)
[ -f "$SIMRDMA" ] || die "no simrdma module for $KVER: run scripts/vm/prepare.sh"
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
CGO_ENABLED=0 go build -ldflags '-s -w' -o "$WORK/bin/fwd" ./integration/cluster/fwd
build_node_images

CNI_BIN_DIR="$ROOT/.tools/cni/bin" RC_BIN_DIR="$WORK/bin" SIMRDMA_KO="$SIMRDMA" "$ROOT/scripts/vm/initramfs.sh" "$KDIR" "$OUT/base.cpio.gz" \
	"$ROOT/integration/vm/scenarios" "$ROOT/integration/cluster/guest"

S="$WORK/stage"
mkdir -p "$S/usr/local/bin" "$S/usr/sbin" "$S/images" "$S/etc" "$S/lib/modules/$KVER"
# The node tier's runtime and device plugin configs; the cluster's kubelet.
for f in containerd rdma-dp passwd group; do
	cp -a "$ROOT/integration/node/guest/etc/$f" "$S/etc/"
done
cp -a "$ROOT/integration/cluster/guest/etc/." "$S/etc/"
stage_node_parts "$S"
(cd "$S" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >"$OUT/node.cpio.gz")
rm -rf "$WORK"
cat >"$OUT/env" <<EOV
QEMU=$QEMU
KERNEL=$KDIR/vmlinuz
KVER=$KVER
EOV
echo "cluster-initramfs: $(du -h "$OUT/base.cpio.gz" | cut -f1) + $(du -h "$OUT/node.cpio.gz" | cut -f1), kernel $KVER" >&2
