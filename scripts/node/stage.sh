# shellcheck shell=bash
# build_node_images: writes into $WORK/images the OCI archives every node VM
# imports: pause (containerd 2.4.2's default sandbox image), the pods' image
# (the VM tier's guest userland $ROOTFS: busybox, ip, rdma, rping, their
# libraries, the rxe verbs provider) and, when IMAGE names it, make image's
# rdma-chain (the cluster tier's nodes pull it from a registry instead).
# Reads ROOT, ROOTFS, IMAGE and WORK.
build_node_images() {
	CGO_ENABLED=0 go -C "$ROOT" build -trimpath -ldflags '-s -w' -o "$WORK/pause" ./integration/node/guest/pause
	go -C "$ROOT/internal/mkimage" run . --version node-test --out "$WORK/images/pause.tar" \
		--name registry.k8s.io/pause --tag 3.10.2 --entrypoint /pause "$WORK/pause" >&2
	go -C "$ROOT/internal/mkimage" run . --version node-test --out "$WORK/images/test.tar" \
		--name localhost/rdma-chain-test --tag node --entrypoint /bin/busybox --tree "$ROOTFS" "$WORK/pause" >&2
	if [ -n "$IMAGE" ]; then
		cp "$IMAGE" "$WORK/images/rdma-chain.tar"
	fi
}

# stage_node_parts S: puts into the staging tree S what every node VM runs
# beside its own configs: kubelet, the RDMA device plugin, containerd with
# its shim and ctr, runc with its libraries, the pci.ids the device plugin
# names devices from, and the OCI archives of $WORK/images: no kernel's
# part (stage_overlay is). Sourced by scripts/node/run.sh and
# scripts/cluster/initramfs.sh; reads KUBELET, RDMA_DP, CTRD, RUNC and WORK,
# and their die.
stage_node_parts() {
	local S=$1 b lib
	for b in "$KUBELET" "$RDMA_DP" "$CTRD/containerd" "$CTRD/containerd-shim-runc-v2" "$CTRD/ctr"; do
		cp "$b" "$S/usr/local/bin/"
	done
	# The device plugin names PCI devices from pci.ids (ghw); without it, it exits.
	[ -f /usr/share/misc/pci.ids ] || die "/usr/share/misc/pci.ids missing: run scripts/node/parts.sh"
	install -D -m 0644 /usr/share/misc/pci.ids "$S/usr/share/misc/pci.ids"
	cp "$RUNC" "$S/usr/sbin/runc"
	ldd "$RUNC" | awk '/=>/ {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | while read -r lib; do
		[ -n "$lib" ] || continue
		case "$lib" in
		*/ld-linux-x86-64.so.2) install -D -m 0755 "$(readlink -f "$lib")" "$S/lib64/ld-linux-x86-64.so.2" ;;
		*) install -D -m 0755 "$(readlink -f "$lib")" "$S/lib/x86_64-linux-gnu/$(basename "$lib")" ;;
		esac
	done
	cp "$WORK/images/"*.tar "$S/images/"
}

# stage_overlay S KDIR KVER: puts kernel KVER's overlay module (containerd's
# snapshotter needs it) from KDIR into S at lib/modules/KVER/overlay.ko.
stage_overlay() {
	local S=$1 KDIR=$2 KVER=$3 ov
	mkdir -p "$S/lib/modules/$KVER"
	ov=$(awk -F: '$1 ~ /\/overlay\.ko/ {print $1; exit}' "$KDIR/lib/modules/$KVER/modules.dep")
	[ -n "$ov" ] || die "no overlay module in $KVER"
	case "$ov" in
	*.xz) xz -dc "$KDIR/lib/modules/$KVER/$ov" >"$S/lib/modules/$KVER/overlay.ko" ;;
	*) cp "$KDIR/lib/modules/$KVER/$ov" "$S/lib/modules/$KVER/overlay.ko" ;;
	esac
}
