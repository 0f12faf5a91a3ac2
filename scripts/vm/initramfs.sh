#!/usr/bin/env bash
# Builds the test VM's initramfs (newc cpio, gzip -1).
#
#   scripts/vm/initramfs.sh KERNEL_DIR OUT.cpio.gz SCENARIO_DIR...
#
# KERNEL_DIR is a kernel tree made by prepare.sh (vmlinuz, kver, lib/modules).
# Contents: the guest userland of prepare.sh (busybox, ip, rdma, rping, libs,
# rxe verbs provider), the modules soft-RoCE and the CNI plugins need
# (decompressed, with their dependencies, in load order), the CNI tools, the
# project's binaries, the scenario scripts (every *.sh of each SCENARIO_DIR,
# into /scenarios) and /init.
#
# Binaries (all static) come from, overridable by environment:
#   RC_BIN_DIR   every executable in it goes to /usr/local/bin (rdma-chain,
#                fakekubelet); rdma-chain is also installed in /opt/cni/bin
#   CNI_BIN_DIR  reference plugins -> /opt/cni/bin   (.tools/cni/bin)
#   CNITOOL      cnitool -> /usr/local/bin           (.tools/bin/cnitool)
#   SIMRDMA_KO   optional: the simrdma test module built for this kernel by
#                prepare.sh -> /lib/modules/KVER/simrdma.ko
# The virtio-net modules (load-nic) and simrdma.ko are loaded only in a boot
# whose kernel command line has rc.simrdma=NETDEV (init.sh), so boots without
# a second NIC are unchanged; bonding (load-bond) only by the scenarios that
# build bonds (lib.sh load_bonding); virtio_blk and ext4 (load-disk) only by
# the cluster node that has a disk (integration/cluster/guest/init.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 3 ] || { echo "usage: $0 KERNEL_DIR OUT.cpio.gz SCENARIO_DIR..." >&2; exit 2; }
KDIR=$(cd "$1" && pwd)
OUT=$2
shift 2
die() { echo "vm-initramfs: ERROR: $*" >&2; exit 1; }

ENV="$ROOT/.cache/vm/env"
[ -f "$ENV" ] || die "$ENV missing: run scripts/vm/prepare.sh"
ROOTFS=$(awk -F= '$1=="ROOTFS" {print $2}' "$ENV")
[ -f "$ROOTFS/.done" ] || die "guest userland $ROOTFS missing: run scripts/vm/prepare.sh"
KVER=$(cat "$KDIR/kver")
MDIR="$KDIR/lib/modules/$KVER"
[ -f "$MDIR/modules.dep" ] || die "$MDIR/modules.dep missing"
CNI_BIN_DIR=${CNI_BIN_DIR:-$ROOT/.tools/cni/bin}
CNITOOL=${CNITOOL:-$ROOT/.tools/bin/cnitool}
RC_BIN_DIR=${RC_BIN_DIR:-}

# Modules, in the order they are wanted; dependencies come first.
# crc32_generic: rdma_rxe asks the crypto API for crc32 (not in modules.dep);
# without it creating rxe0 fails with ENOENT.
WANT="crc32_generic configfs ib_core ib_uverbs ib_umad udp_tunnel ip6_udp_tunnel rdma_rxe
ib_cm iw_cm rdma_cm rdma_ucm smc smc_diag veth macvlan ipvlan llc stp bridge dummy"
# Wanted where the kernel has them, left out where it has not: crc32_generic
# and crc32c_generic (gone since Linux 6.15, when rxe and ext4 took them
# from the library), smc and
# smc_diag (Debian's 7.3 has no SMC: CONFIG_DIBS is not set), nfnetlink
# (built in on 7.3 without a modules.builtin line). What the guest kernel
# then offers is asserted by the caps scenario against docs/kernels.md.
ABSENT_OK=" crc32_generic crc32c_generic smc smc_diag nfnetlink "
# Shipped but loaded only with rc.load=optional on the kernel command line:
# netlink families a node usually has but the test kernel does not need
# (vishvananda/netlink's NewHandle() without families opens XFRM and NETFILTER
# sockets too, which fails without these).
OPTIONAL="xfrm_user nfnetlink"
# The virtio-net NIC simrdma binds to, in load order (on 6.12 virtio and
# virtio_pci are built in and left out by resolve).
NIC="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover net_failover virtio_net"
# Bonds (the bond scenarios load it with max_bonds=0, so no boot gets a
# bond0 it did not ask for).
BOND="bonding"
# A virtio disk with ext4 (the cluster tier's node that is powered off and
# booted again keeps /var/lib and /var/log on one), loaded only there.
# ext4 asks the crypto API for crc32c (not in modules.dep): crc32c_generic
# gives it on kernels before 6.15, which took it from the library.
DISK="virtio_blk crc32c_generic ext4"
SIMRDMA_KO=${SIMRDMA_KO:-}

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -a "$ROOTFS/." "$STAGE/"
rm -f "$STAGE/.done" "$STAGE/.key"
mkdir -p "$STAGE"/{proc,sys,dev,run,tmp,etc,root,opt/cni/bin,usr/local/bin,etc/cni/net.d,scenarios} \
	"$STAGE/lib/modules/$KVER"
mkdir -p "$STAGE/var/lib"
ln -s /run "$STAGE/var/run"

# --- modules ---
# resolve NAMES...: prints "name path" for NAMES and their dependencies, each
# dependency before its users, built-ins left out (awk: a bash loop over the
# ~4000 lines of modules.dep forks too much).
resolve() {
	awk -v want="$*" '
	function norm(p,   n) { n = p; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/-/, "_", n); return n }
	function add(n,   k, i, d) {
		if (n in seen) return
		seen[n] = 1
		if (n in builtin) return
		if (!(n in path)) { print "MISSING " n; return }
		k = split(deps[n], d, " ")
		# modules.dep lists dependencies so that loading them last-to-first works
		for (i = k; i >= 1; i--) add(norm(d[i]))
		print n, path[n]
	}
	FILENAME ~ /modules\.builtin$/ { builtin[norm($0)] = 1; next }
	{ i = index($0, ":"); p = substr($0, 1, i - 1); n = norm(p); path[n] = p; deps[n] = substr($0, i + 1) }
	END { k = split(want, w, " "); for (i = 1; i <= k; i++) add(w[i]) }
	' "$MDIR/modules.builtin" "$MDIR/modules.dep"
}
ORDER=()
declare -A PATHOF
NWANT=0
while read -r n p; do
	if [ "$n" = MISSING ]; then
		case "$ABSENT_OK" in *" $p "*) echo "vm-initramfs: $KVER has no module $p" >&2; continue ;; esac
		die "module $p not found in $KVER"
	fi
	ORDER+=("$n"); PATHOF[$n]=$p
done < <(resolve $WANT)
NWANT=${#ORDER[@]}
while read -r n p; do
	[ "$n" != MISSING ] || case "$ABSENT_OK" in *" $p "*) continue ;; *) die "module $p not found in $KVER" ;; esac
	[ -z "${PATHOF[$n]:-}" ] || continue
	ORDER+=("$n"); PATHOF[$n]=$p
done < <(resolve $WANT $OPTIONAL)
NOPT=${#ORDER[@]}
while read -r n p; do
	[ "$n" != MISSING ] || case "$ABSENT_OK" in *" $p "*) continue ;; *) die "module $p not found in $KVER" ;; esac
	[ -z "${PATHOF[$n]:-}" ] || continue
	ORDER+=("$n"); PATHOF[$n]=$p
done < <(resolve $WANT $OPTIONAL $NIC)
NNIC=${#ORDER[@]}
while read -r n p; do
	[ "$n" != MISSING ] || case "$ABSENT_OK" in *" $p "*) continue ;; *) die "module $p not found in $KVER" ;; esac
	[ -z "${PATHOF[$n]:-}" ] || continue
	ORDER+=("$n"); PATHOF[$n]=$p
done < <(resolve $WANT $OPTIONAL $NIC $BOND)
NBOND=${#ORDER[@]}
while read -r n p; do
	[ "$n" != MISSING ] || case "$ABSENT_OK" in *" $p "*) continue ;; *) die "module $p not found in $KVER" ;; esac
	[ -z "${PATHOF[$n]:-}" ] || continue
	ORDER+=("$n"); PATHOF[$n]=$p
done < <(resolve $WANT $OPTIONAL $NIC $BOND $DISK)
: >"$STAGE/lib/modules/load-order"
: >"$STAGE/lib/modules/load-optional"
: >"$STAGE/lib/modules/load-nic"
: >"$STAGE/lib/modules/load-bond"
: >"$STAGE/lib/modules/load-disk"
i=0
for n in "${ORDER[@]}"; do
	src="$MDIR/${PATHOF[$n]}"
	dst="$STAGE/lib/modules/$KVER/$n.ko"
	case "$src" in
	*.ko.xz) xz -dc "$src" >"$dst" ;;
	*.ko.zst) zstd -qdc "$src" >"$dst" ;;
	*.ko.gz) gzip -dc "$src" >"$dst" ;;
	*) cp "$src" "$dst" ;;
	esac
	if [ $i -lt $NWANT ]; then
		echo "$n" >>"$STAGE/lib/modules/load-order"
	elif [ $i -lt $NOPT ]; then
		echo "$n" >>"$STAGE/lib/modules/load-optional"
	elif [ $i -lt $NNIC ]; then
		echo "$n" >>"$STAGE/lib/modules/load-nic"
	elif [ $i -lt $NBOND ]; then
		echo "$n" >>"$STAGE/lib/modules/load-bond"
	else
		echo "$n" >>"$STAGE/lib/modules/load-disk"
	fi
	i=$((i + 1))
done
echo "$KVER" >"$STAGE/lib/modules/kver"
if [ -n "$SIMRDMA_KO" ]; then
	[ -f "$SIMRDMA_KO" ] || die "SIMRDMA_KO=$SIMRDMA_KO missing"
	cp "$SIMRDMA_KO" "$STAGE/lib/modules/$KVER/simrdma.ko"
fi

# --- binaries ---
install_bin() { # src dst-dir [name]
	local src=$1 dir=$2 name=${3:-$(basename "$1")}
	[ -x "$src" ] || die "binary $src missing"
	file_out=$(LC_ALL=C ldd "$src" 2>&1 || true)
	case "$file_out" in *"not a dynamic executable"* | *"statically linked"*) ;; *) die "$src is not static" ;; esac
	# Debug info only makes the initrd bigger (and slower to unpack under TCG).
	strip -o "$STAGE$dir/$name" "$src" 2>/dev/null || cp "$src" "$STAGE$dir/$name"
	chmod 0755 "$STAGE$dir/$name"
}
for p in ptp host-local loopback ipvlan macvlan; do install_bin "$CNI_BIN_DIR/$p" /opt/cni/bin; done
install_bin "$CNITOOL" /usr/local/bin
if [ -n "$RC_BIN_DIR" ]; then
	for b in "$RC_BIN_DIR"/*; do
		[ -f "$b" ] && [ -x "$b" ] || continue
		install_bin "$b" /usr/local/bin
	done
	# The plugin runs the SMC socket hook binary from its own directory.
	for b in rdma-chain rdma-chain-smc-hook; do
		[ -x "$RC_BIN_DIR/$b" ] && install_bin "$RC_BIN_DIR/$b" /opt/cni/bin
	done
fi

# --- scenarios and /init ---
for d in "$@"; do
	[ -d "$d" ] || die "scenario dir $d missing"
	cp "$d"/*.sh "$STAGE/scenarios/"
done
chmod 0755 "$STAGE"/scenarios/*.sh
[ -f "$STAGE/scenarios/init.sh" ] || die "no init.sh among the scenario files"
mv "$STAGE/scenarios/init.sh" "$STAGE/init"

mkdir -p "$(dirname "$OUT")"
(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >"$OUT.tmp")
mv "$OUT.tmp" "$OUT"
echo "vm-initramfs: $OUT ($(du -h "$OUT" | cut -f1), kernel $KVER, ${#ORDER[@]} modules)" >&2
