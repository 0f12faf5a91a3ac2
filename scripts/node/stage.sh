# shellcheck shell=bash
# stage_node_parts S: puts into the staging tree S what every node VM runs
# beside its own configs: kubelet, the RDMA device plugin, containerd with
# its shim and ctr, runc with its libraries, the pci.ids the device plugin
# names devices from, the kernel's overlay module, and the OCI archives of
# $WORK/images. Sourced by scripts/node/run.sh and scripts/cluster/initramfs.sh;
# reads KUBELET, RDMA_DP, CTRD, RUNC, KDIR, KVER and WORK, and their die.
stage_node_parts() {
	local S=$1 b lib ov
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
	ov=$(awk -F: '$1 ~ /\/overlay\.ko/ {print $1; exit}' "$KDIR/lib/modules/$KVER/modules.dep")
	[ -n "$ov" ] || die "no overlay module in $KVER"
	case "$ov" in
	*.xz) xz -dc "$KDIR/lib/modules/$KVER/$ov" >"$S/lib/modules/$KVER/overlay.ko" ;;
	*) cp "$KDIR/lib/modules/$KVER/$ov" "$S/lib/modules/$KVER/overlay.ko" ;;
	esac
	cp "$WORK/images/"*.tar "$S/images/"
}
