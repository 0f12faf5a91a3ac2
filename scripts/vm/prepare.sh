#!/usr/bin/env bash
# Prepares everything the VM test tier needs, cached under .cache/vm/:
#   - host tools: qemu-system-x86_64, static busybox, cpio (apt-get, only if missing)
#   - two Debian kernels, extracted (never installed): the 6.1 series that
#     linux-image-amd64 points at, and the newest 6.12 series
#   - a guest userland tree ("rootfs"): busybox, ip, rdma, rping, their
#     libraries, the rxe verbs provider
#   - the test-only RDMA module integration/vm/simrdma built for each kernel
#     (gcc and Debian's linux-headers-KVER, installed with apt-get), cached
#     per kernel version and module source hash. A kernel it cannot be built
#     for gets no SIMRDMA_* line; under CI=true that is an error.
# Each piece lives in a folder named after the package versions it came from,
# so a second run with the same versions only checks and prints.
# Writes .cache/vm/env (KEY=VALUE lines) and prints it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE="$ROOT/.cache/vm"
mkdir -p "$CACHE/debs"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

log() { echo "vm-prepare: $*" >&2; }
die() { echo "vm-prepare: ERROR: $*" >&2; exit 1; }

# apt_run NAME CMD...: runs an apt command, its output kept in
# $CACHE/apt-NAME.log; on failure prints the command and the log's last lines.
apt_run() {
	local out="$CACHE/apt-$1.log"
	shift
	local rc=0
	"$@" >"$out" 2>&1 || rc=$?
	[ $rc -ne 0 ] || return 0
	echo "vm-prepare: FAILED (exit $rc): $*" >&2
	tail -n 25 "$out" | sed 's/^/vm-prepare:   | /' >&2
	echo "vm-prepare:   (full output: $out)" >&2
	return 1
}
# apt_install PKG...: apt-get install; when it fails (a package that cannot
# be resolved from stale lists, most often), apt-get update and retry once.
apt_install() {
	log "apt-get install $*"
	apt_run install apt-get install -y --no-install-recommends "$@" && return 0
	log "retrying once after apt-get update"
	apt_run update apt-get update ||
		die "apt-get update failed (output above): fix the machine's apt sources or network, then rerun $0"
	apt_run install apt-get install -y --no-install-recommends "$@" ||
		die "apt-get install $* failed after apt-get update (output above): install them by hand or fix apt, then rerun $0"
}
SIMRDMA_SRC="$ROOT/integration/vm/simrdma"
SIMRDMA_HASH=$(cat "$SIMRDMA_SRC/Kbuild" "$SIMRDMA_SRC/Makefile" "$SIMRDMA_SRC/simrdma.c" | sha256sum | cut -c1-12)

# Fast path: nothing changed since the last run (same script, same apt lists,
# all trees present) -> print the env and stop. VM_PREPARE_FORCE=1 re-checks.
STAMP="script=$(sha256sum "$0" | cut -c1-16) simrdma=$SIMRDMA_HASH lists=$(stat -c %Y /var/lib/apt/lists 2>/dev/null || echo 0)"
if [ "${VM_PREPARE_FORCE:-0}" != 1 ] && [ -f "$CACHE/env" ] && grep -qxF "STAMP=$STAMP" "$CACHE/env"; then
	ok=1
	for d in $(awk -F= '/^(ROOTFS|KERNEL_6_1|KERNEL_6_12)=/ {print $2}' "$CACHE/env"); do
		[ -f "$d/.done" ] || ok=0
	done
	for k in 6_1 6_12; do # a module that could not be built is retried
		f=$(awk -F= -v k="SIMRDMA_$k" '$1==k {print $2}' "$CACHE/env")
		[ -n "$f" ] && [ -f "$f" ] || ok=0
	done
	command -v qemu-system-x86_64 >/dev/null || ok=0
	if [ $ok = 1 ]; then cat "$CACHE/env"; exit 0; fi
fi

# ---- host tools -----------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed"; then
	need+=(busybox-static)
fi
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
command -v depmod >/dev/null || [ -x /sbin/depmod ] || need+=(kmod)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
	apt_install "${need[@]}"
fi
QEMU=$(command -v qemu-system-x86_64)
BUSYBOX=/bin/busybox
{ ldd "$BUSYBOX" 2>&1 || true; } | grep -q "not a dynamic executable" || die "$BUSYBOX is not static (install busybox-static)"

# One apt-cache call for all candidate versions (each call costs ~0.5 s).
declare -A CAND
load_candidates() { # pkg...
	local p v
	while read -r p v; do CAND[$p]=$v; done < <(apt-cache policy "$@" 2>/dev/null |
		awk '/^[^ ].*:$/ {sub(":$", "", $1); p=$1} /Candidate:/ {print p, $2}')
}
candidate() { # pkg -> candidate version
	[ -n "${CAND[$1]:-}" ] || load_candidates "$1"
	echo "${CAND[$1]:-}"
}

# download PKG into debs/, print the .deb path
download() {
	local pkg=$1 ver f
	ver=$(candidate "$pkg")
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no candidate for $pkg (apt-get update?)"
	f=$(ls "$CACHE/debs/${pkg}_${ver//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
	if [ -z "$f" ]; then
		log "apt-get download $pkg=$ver"
		(cd "$CACHE/debs" && apt_run download apt-get download -o APT::Sandbox::User=root "$pkg=$ver") ||
			die "apt-get download $pkg=$ver failed (output above): check apt sources/network, or run apt-get update, then rerun $0"
		f=$(ls "$CACHE/debs/${pkg}_${ver//:/%3a}_"*.deb | head -1)
	fi
	echo "$f"
}

# ---- kernels ----------------------------------------------------------------
resolve_61() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-6\.1\.[0-9]+-[0-9]+-amd64$/ {print $2; exit}'
}
resolve_612() {
	# The newest linux-image-6.12.N+debNN-amd64 (no dbg, rt, cloud, unsigned,
	# signed-template or meta package).
	apt-cache search --names-only '^linux-image-6\.12\.' 2>/dev/null | awk '{print $1}' |
		grep -E '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64$' | sort -V | tail -1
}

# kernel PKG -> prints the extracted folder (has vmlinuz and lib/modules/KVER)
kernel() {
	local pkg=$1 ver dir deb
	ver=$(candidate "$pkg")
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no candidate for $pkg"
	dir="$CACHE/kernel-${pkg#linux-image-}_${ver}"
	if [ ! -f "$dir/.done" ]; then
		deb=$(download "$pkg")
		log "extracting $(basename "$deb")"
		rm -rf "$dir" "$dir.tmp"
		mkdir -p "$dir.tmp"
		dpkg-deb -x "$deb" "$dir.tmp"
		local kver
		kver=$(ls "$dir.tmp/lib/modules" | head -1)
		[ -n "$kver" ] && [ -f "$dir.tmp/boot/vmlinuz-$kver" ] || die "$deb has no vmlinuz/modules"
		ln -s "boot/vmlinuz-$kver" "$dir.tmp/vmlinuz"
		echo "$kver" >"$dir.tmp/kver"
		# Debian generates modules.dep at install time; we never install.
		PATH="$PATH:/sbin:/usr/sbin" depmod -b "$dir.tmp" "$kver" || die "depmod failed for $kver"
		touch "$dir.tmp/.done"
		mv "$dir.tmp" "$dir"
		rm -f "$deb" # 100+ MB each; the extracted tree is the cache
	fi
	echo "$dir"
}

K61_PKG=$(resolve_61)
[ -n "$K61_PKG" ] || die "cannot resolve the 6.1 kernel from linux-image-amd64"
K612_PKG=$(resolve_612)
[ -n "$K612_PKG" ] || die "cannot resolve a 6.12 kernel (apt-cache search linux-image-6.12)"
USER_PKGS="rdmacm-utils ibverbs-providers libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200"
load_candidates "$K61_PKG" "$K612_PKG" $USER_PKGS
K61=$(kernel "$K61_PKG")
K612=$(kernel "$K612_PKG")

# ---- the simrdma test module ------------------------------------------------
# simrdma KERNEL_DIR -> prints the path of simrdma.ko built for that kernel,
# or fails (the reason on stderr).
simrdma() {
	local kdir=$1 kver hdr out b
	kver=$(cat "$kdir/kver")
	out="$CACHE/simrdma-$kver-$SIMRDMA_HASH"
	if [ -f "$out/simrdma.ko" ]; then echo "$out/simrdma.ko"; return 0; fi
	hdr="linux-headers-$kver"
	if ! dpkg-query -W -f='${Status}' "$hdr" 2>/dev/null | grep -q "install ok installed"; then
		# The 6.12 headers package depends on its linux-image package: apt
		# installs that kernel on this machine too (it is never booted here).
		apt_install "$hdr"
	fi
	[ -d "/usr/src/$hdr" ] || { echo "vm-prepare: $hdr installed but /usr/src/$hdr missing" >&2; return 1; }
	b=$(mktemp -d)
	cp "$SIMRDMA_SRC/Kbuild" "$SIMRDMA_SRC/Makefile" "$SIMRDMA_SRC/simrdma.c" "$b/"
	log "building simrdma.ko for $kver"
	if ! make -C "/usr/src/$hdr" M="$b" modules >"$b/build.log" 2>&1; then
		echo "vm-prepare: FAILED: make -C /usr/src/$hdr M=$b modules" >&2
		tail -n 25 "$b/build.log" | sed 's/^/vm-prepare:   | /' >&2
		return 1
	fi
	local vm
	vm=$(PATH="$PATH:/sbin:/usr/sbin" modinfo -F vermagic "$b/simrdma.ko" 2>&1) || true
	case "$vm" in "$kver "*) ;; *) echo "vm-prepare: simrdma.ko for $kver has vermagic '$vm'" >&2; return 1 ;; esac
	mkdir -p "$out"
	cp "$b/simrdma.ko" "$out/simrdma.ko"
	rm -rf "$b"
	echo "$out/simrdma.ko"
}
SIMRDMA_ENV=
for pair in "6_1:$K61" "6_12:$K612"; do
	if ko=$(simrdma "${pair#*:}"); then
		SIMRDMA_ENV+="SIMRDMA_${pair%%:*}=$ko"$'\n'
	elif [ "${CI:-}" = true ]; then
		die "cannot build the simrdma test module for $(cat "${pair#*:}/kver") (see above); the exclusive-mode VM tier needs it"
	else
		log "WARNING: no simrdma module for $(cat "${pair#*:}/kver"): the exclusive-rdma VM scenario will be unavailable"
	fi
done
for old in "$CACHE"/simrdma-*; do # builds of older module sources
	case "$old" in *"-$SIMRDMA_HASH") ;; *) [ -e "$old" ] && rm -rf "$old" ;; esac
done

# ---- guest userland ---------------------------------------------------------
key_src="busybox-static=$(dpkg-query -W -f='${Version}' busybox-static)"
key_src+=" iproute2=$(dpkg-query -W -f='${Version}' iproute2)"
for p in $USER_PKGS; do key_src+=" $p=$(candidate "$p")"; done
key_src+=" script=$(sha256sum "$0" | cut -c1-12)"
KEY=$(echo "$key_src" | sha256sum | cut -c1-12)
ROOTFS="$CACHE/rootfs-$KEY"

copy_with_libs() { # binary dest-path-in-rootfs [LD_LIBRARY_PATH]
	local bin=$1 dest=$2 llp=${3:-} lib
	install -D -m 0755 "$bin" "$ROOTFS$dest"
	while read -r lib; do
		[ -n "$lib" ] || continue
		copy_lib "$lib"
	done < <(LD_LIBRARY_PATH=$llp ldd "$bin" | awk '
		/not found/ {print "MISSING:" $1; next}
		/=>/ {print $3; next}
		$1 ~ /^\/.*ld-linux/ {print $1}')
}
copy_lib() { # absolute path of a library (host or extracted tree)
	local lib=$1 base
	case "$lib" in MISSING:*) die "library ${lib#MISSING:} not found for the guest";; esac
	base=$(basename "$lib")
	case "$lib" in
	*/ld-linux-x86-64.so.2) install -D -m 0755 "$(readlink -f "$lib")" "$ROOTFS/lib64/ld-linux-x86-64.so.2" ;;
	*) install -D -m 0755 "$(readlink -f "$lib")" "$ROOTFS/lib/x86_64-linux-gnu/$base" ;;
	esac
}

if [ ! -f "$ROOTFS/.done" ]; then
	rm -rf "$ROOTFS" "$CACHE/extract-$KEY"
	X="$CACHE/extract-$KEY"
	mkdir -p "$X" "$ROOTFS"
	for p in $USER_PKGS; do dpkg-deb -x "$(download "$p")" "$X"; done
	XLIB="$X/usr/lib/x86_64-linux-gnu:$X/lib/x86_64-linux-gnu"

	install -D -m 0755 "$BUSYBOX" "$ROOTFS/bin/busybox"
	copy_with_libs "$(command -v ip || echo /bin/ip)" /usr/sbin/ip
	copy_with_libs "$(command -v rdma || echo /usr/bin/rdma)" /usr/sbin/rdma
	copy_with_libs "$X/usr/bin/rping" /usr/bin/rping "$XLIB"
	for b in ibv_devices ibv_devinfo; do
		[ -x "$X/usr/bin/$b" ] && copy_with_libs "$X/usr/bin/$b" "/usr/bin/$b" "$XLIB"
	done
	# The rxe provider is dlopen()ed by libibverbs: copy it and its libraries.
	prov=$(ls "$X"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so | head -1)
	[ -n "$prov" ] || die "no librxe provider in ibverbs-providers"
	copy_with_libs "$prov" "/usr/lib/x86_64-linux-gnu/libibverbs/$(basename "$prov")" "$XLIB"
	install -D -m 0644 "$X/etc/libibverbs.d/rxe.driver" "$ROOTFS/etc/libibverbs.d/rxe.driver"
	# pthread_cancel in rping dlopen()s libgcc_s; ldd does not list it.
	copy_lib "$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ {print $NF; exit}')"
	rm -rf "$X"
	echo "$key_src" >"$ROOTFS/.key"
	touch "$ROOTFS/.done"
	log "guest userland in $ROOTFS"
fi
for old in "$CACHE"/rootfs-*; do # trees of older package versions
	[ "$old" = "$ROOTFS" ] || rm -rf "$old"
done

cat >"$CACHE/env.tmp" <<EOF
QEMU=$QEMU
ROOTFS=$ROOTFS
KERNEL_6_1=$K61
KERNEL_6_1_PKG=$K61_PKG
KERNEL_6_12=$K612
KERNEL_6_12_PKG=$K612_PKG
${SIMRDMA_ENV}STAMP=$STAMP
EOF
mv "$CACHE/env.tmp" "$CACHE/env"
cat "$CACHE/env"
