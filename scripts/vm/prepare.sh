#!/usr/bin/env bash
# Prepares everything the VM test tier needs, cached under .cache/vm/:
#   - host tools: qemu-system-x86_64, static busybox, cpio (apt-get, only if missing)
#   - three Debian kernels, extracted (never installed): the 6.1 series that
#     linux-image-amd64 points at, the newest 6.12 series, and the newest
#     7.3 series of trixie-backports ("7.3"), downloaded through an apt of
#     its own (.cache/vm/apt-trixie, apt_suite_config in scripts/apt.sh) so
#     that the host's apt keeps seeing bookworm alone
#   - a guest userland tree ("rootfs"): busybox, ip, rdma, rping, perftest's
#     ib_send_bw, ib_send_lat and ib_write_bw, their libraries, the rxe verbs provider
#   - the test-only RDMA module integration/vm/simrdma built for each kernel
#     (gcc-12 installed with apt-get; Debian's linux-headers-KVER and the two
#     packages it builds with extracted under .cache/vm/headers-*, never
#     installed: the 6.12 one would install its kernel too), cached
#     per kernel version and module source hash. A kernel it cannot be built
#     for gets no SIMRDMA_* line; under CI=true that is an error. The 7.3
#     headers want trixie's gcc-14 and libc: they are built in a trixie
#     chroot (debootstrap --variant=minbase, run from its bookworm .deb
#     without installing it) under .cache/vm/build-trixie-*, never on the host.
# Each piece lives in a folder named after the package versions it came from,
# so a second run with the same versions only checks and prints.
# VM_KERNELS (default "6.1 6.12 7.3") names the kernels to prepare and
# VM_SIMRDMA=0 skips the test module (and the linux-headers it needs):
# `make demo` boots one 6.12 kernel and no test module.
# Writes .cache/vm/env (KEY=VALUE lines) and prints it; what an earlier run
# prepared and this one did not ask for stays listed while it exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE="$ROOT/.cache/vm"
mkdir -p "$CACHE/debs"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

log() { echo "vm-prepare: $*" >&2; }
die() { echo "vm-prepare: ERROR: $*" >&2; exit 1; }

# apt_install, apt_candidate, apt_newest, apt_resolve, apt_download: wait for
# a held apt lock, refresh the lists once when something cannot be resolved,
# installed or downloaded, and report a failing step with its output.
APT_PREFIX=vm-prepare
# shellcheck source=scripts/apt.sh
. "$ROOT/scripts/apt.sh"
SIMRDMA_SRC="$ROOT/integration/vm/simrdma"
SIMRDMA_HASH=$(cat "$SIMRDMA_SRC/Kbuild" "$SIMRDMA_SRC/Makefile" "$SIMRDMA_SRC/simrdma.c" | sha256sum | cut -c1-12)
VM_KERNELS=${VM_KERNELS:-6.1 6.12 7.3}
VM_SIMRDMA=${VM_SIMRDMA:-1}
for k in $VM_KERNELS; do
	case $k in 6.1 | 6.12 | 7.3) ;; *) echo "vm-prepare: VM_KERNELS: unknown kernel $k (6.1, 6.12 or 7.3)" >&2; exit 2 ;; esac
done
wants() { case " $VM_KERNELS " in *" $1 "*) return 0 ;; esac; return 1; }

# Fast path: nothing changed since the last run (same script, same apt lists,
# all trees present) -> print the env and stop. VM_PREPARE_FORCE=1 re-checks.
# The lists are those apt uses (APT_CONFIG may point Dir::State::Lists elsewhere).
stamp() {
	local LISTS=/var/lib/apt/lists/
	eval "$(apt-config shell LISTS Dir::State::Lists/d 2>/dev/null)"
	echo "script=$(sha256sum "$0" | cut -c1-16) simrdma=$SIMRDMA_HASH lists=$(stat -c %Y "$LISTS" 2>/dev/null || echo 0)" \
		"trixie=$(stat -c %Y "$CACHE/apt-trixie/lists" 2>/dev/null || echo 0)"
}
STAMP=$(stamp)
if [ "${VM_PREPARE_FORCE:-0}" != 1 ] && [ -f "$CACHE/env" ] && grep -qxF "STAMP=$STAMP" "$CACHE/env"; then
	ok=1
	envkey() { awk -F= -v k="$1" '$1==k {print $2}' "$CACHE/env"; }
	d=$(envkey ROOTFS)
	[ -n "$d" ] && [ -f "$d/.done" ] || ok=0
	for k in $VM_KERNELS; do
		d=$(envkey "KERNEL_${k//./_}")
		[ -n "$d" ] && [ -f "$d/.done" ] || ok=0
		if [ "$VM_SIMRDMA" = 1 ]; then # a module that could not be built is retried
			f=$(envkey "SIMRDMA_${k//./_}")
			[ -n "$f" ] && [ -f "$f" ] || ok=0
		fi
	done
	command -v qemu-system-x86_64 >/dev/null || ok=0
	command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || ok=0
	if [ $ok = 1 ]; then cat "$CACHE/env"; exit 0; fi
fi

# ---- host tools -----------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed"; then
	need+=(busybox-static)
fi
command -v cpio >/dev/null || need+=(cpio)
# The cluster tier's node disk (the node that loses power keeps /var/lib).
command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || need+=(e2fsprogs)
command -v xz >/dev/null || need+=(xz-utils)
command -v depmod >/dev/null || [ -x /sbin/depmod ] || need+=(kmod)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
# debootstrap (7.3's build chroot) fetches with wget.
if wants 7.3 && [ "$VM_SIMRDMA" = 1 ]; then command -v wget >/dev/null || need+=(wget); fi
if [ ${#need[@]} -gt 0 ]; then
	apt_install "${need[@]}" || die "cannot install ${need[*]} (see above)"
fi
QEMU=$(command -v qemu-system-x86_64)
BUSYBOX=/bin/busybox
{ ldd "$BUSYBOX" 2>&1 || true; } | grep -q "not a dynamic executable" || die "$BUSYBOX is not static (install busybox-static)"

# One apt-cache call for all candidate versions (each call costs ~0.5 s).
declare -A CAND
load_candidates() { # pkg...
	local p v
	while read -r p v; do CAND[$p]=$v; done < <(apt-cache policy "$@" 2>/dev/null |
		awk '/^[^ ].*:$/ {sub(":$", "", $1); p=$1} /Candidate:/ && $2 != "(none)" {print p, $2}')
}
candidate() { # pkg -> candidate version (refreshes the lists if it has none)
	[ -n "${CAND[$1]:-}" ] || CAND[$1]=$(apt_candidate "$1") || die "no candidate for $1 (see above)"
	echo "${CAND[$1]}"
}

# download PKG into debs/ (a .deb already there is reused), print its path
download() {
	apt_download "$CACHE/debs" "$1" || die "cannot download $1 (see above)"
}

# ---- kernels ----------------------------------------------------------------
resolve_61() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-6\.1\.[0-9]+-[0-9]+-amd64$/ {print $2; exit}'
}
# kernel PKG -> prints the extracted folder (has vmlinuz and lib/modules/KVER)
kernel() {
	local pkg=$1 ver dir deb
	ver=$(candidate "$pkg")
	dir="$CACHE/kernel-${pkg#linux-image-}_${ver}"
	if [ ! -f "$dir/.done" ]; then
		deb=$(download "$pkg")
		# apt_download resolves the version again after a refresh.
		ver=$(dpkg-deb -f "$deb" Version) || die "cannot read the version of $deb"
		dir="$CACHE/kernel-${pkg#linux-image-}_${ver}"
		log "extracting $(basename "$deb")"
		rm -rf "$dir" "$dir.tmp"
		mkdir -p "$dir.tmp"
		dpkg-deb -x "$deb" "$dir.tmp"
		local kver
		kver=$(ls "$dir.tmp/lib/modules" | head -1)
		[ -n "$kver" ] && [ -f "$dir.tmp/boot/vmlinuz-$kver" ] || die "$deb has no vmlinuz/modules"
		ln -s "boot/vmlinuz-$kver" "$dir.tmp/vmlinuz"
		ln -s "boot/config-$kver" "$dir.tmp/config"
		echo "$kver" >"$dir.tmp/kver"
		# Debian generates modules.dep at install time; we never install.
		PATH="$PATH:/sbin:/usr/sbin" depmod -b "$dir.tmp" "$kver" || die "depmod failed for $kver"
		touch "$dir.tmp/.done"
		mv "$dir.tmp" "$dir"
		rm -f "$deb" # 100+ MB each; the extracted tree is the cache
	fi
	echo "$dir"
}

# kernel7 VERSION-PKG-SUFFIX -> prints the extracted folder of a split 7.x
# kernel: linux-binary-X has usr/lib/modules/KVER/vmlinuz, linux-base-X its
# config, modules.builtin and modules.order, linux-modules-X the modules
# (the linux-image-X metapackage holds none of them).
# Laid out as kernel() lays a 6.x one: vmlinuz, config, kver, lib/modules.
kernel7() {
	local x=$1 ver dir deb mdeb bdeb kver
	ver=$(APT_CONFIG=$TRIXIE_APT candidate "linux-binary-$x")
	dir="$CACHE/kernel-${x}_${ver}"
	if [ ! -f "$dir/.done" ]; then
		deb=$(APT_CONFIG=$TRIXIE_APT download "linux-binary-$x")
		mdeb=$(APT_CONFIG=$TRIXIE_APT download "linux-modules-$x")
		bdeb=$(APT_CONFIG=$TRIXIE_APT download "linux-base-$x")
		ver=$(dpkg-deb -f "$deb" Version) || die "cannot read the version of $deb"
		[ "$(dpkg-deb -f "$mdeb" Version)" = "$ver" ] || die "$mdeb is not version $ver"
		[ "$(dpkg-deb -f "$bdeb" Version)" = "$ver" ] || die "$bdeb is not version $ver"
		dir="$CACHE/kernel-${x}_${ver}"
		log "extracting $(basename "$deb"), $(basename "$bdeb") and $(basename "$mdeb")"
		rm -rf "$dir" "$dir.tmp"
		mkdir -p "$dir.tmp/lib"
		dpkg-deb -x "$deb" "$dir.tmp"
		dpkg-deb -x "$bdeb" "$dir.tmp"
		dpkg-deb -x "$mdeb" "$dir.tmp"
		mv "$dir.tmp/usr/lib/modules" "$dir.tmp/lib/modules"
		kver=$(ls "$dir.tmp/lib/modules" | head -1)
		[ -n "$kver" ] && [ -f "$dir.tmp/lib/modules/$kver/vmlinuz" ] || die "$deb has no vmlinuz"
		[ -f "$dir.tmp/lib/modules/$kver/config" ] && [ -f "$dir.tmp/lib/modules/$kver/modules.builtin" ] ||
			die "$bdeb has no config or modules.builtin"
		ln -s "lib/modules/$kver/vmlinuz" "$dir.tmp/vmlinuz"
		ln -s "lib/modules/$kver/config" "$dir.tmp/config"
		echo "$kver" >"$dir.tmp/kver"
		PATH="$PATH:/sbin:/usr/sbin" depmod -b "$dir.tmp" "$kver" || die "depmod failed for $kver"
		touch "$dir.tmp/.done"
		mv "$dir.tmp" "$dir"
		rm -f "$deb" "$mdeb" "$bdeb"
	fi
	echo "$dir"
}

# Resolved in this shell, not in $(...), so that a refresh of the lists is
# known here (APT_REFRESHED) and not repeated by later steps. When a
# resolution refreshed the lists, both are redone on the fresh ones (stale
# lists may offer an older 6.1 kernel while lacking every 6.12 one).
K_OUT="$CACHE/kernels.tmp"
resolve_kernels() {
	# The newest linux-image-6.12.N+debNN-amd64 (no dbg, rt, cloud,
	# unsigned, signed-template or meta package).
	apt_newest 'linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64' >"$K_OUT" ||
		die "cannot resolve a 6.12 kernel (see above)"
	K612_PKG=$(cat "$K_OUT")
	K73_PKG=
	if wants 7.3; then
		# The newest linux-binary-7.3.N+debNN-amd64 of trixie(-backports).
		APT_CONFIG=$TRIXIE_APT apt_newest 'linux-binary-7\.3\.[0-9]+\+deb[0-9]+-amd64' >"$K_OUT" ||
			die "cannot resolve a 7.3 kernel in trixie-backports (see above)"
		K73_PKG=$(cat "$K_OUT")
	fi
	K61_PKG=
	wants 6.1 || return 0
	apt_resolve "6.1 kernel linux-image-amd64 depends on" resolve_61 >"$K_OUT" ||
		die "cannot resolve the 6.1 kernel (see above)"
	K61_PKG=$(cat "$K_OUT")
}
TRIXIE_APT=
if wants 7.3; then
	TRIXIE_APT=$(apt_suite_config "$CACHE/apt-trixie" trixie trixie-backports) ||
		die "cannot set up the apt lists of trixie and trixie-backports (see above)"
fi
refreshed=$APT_REFRESHED
resolve_kernels
[ "$APT_REFRESHED" = "$refreshed" ] || resolve_kernels
rm -f "$K_OUT"
USER_PKGS="rdmacm-utils ibverbs-providers libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 perftest libibumad3 libpci3"
# shellcheck disable=SC2086 # K61_PKG is empty when 6.1 is not wanted
load_candidates $K61_PKG "$K612_PKG" $USER_PKGS
K61= K612= K73=
wants 6.1 && K61=$(kernel "$K61_PKG")
wants 6.12 && K612=$(kernel "$K612_PKG")
wants 7.3 && K73=$(kernel7 "${K73_PKG#linux-binary-}")

# ---- the simrdma test module ------------------------------------------------
# simrdma KERNEL_DIR -> prints the path of simrdma.ko built for that kernel,
# or fails (the reason on stderr).
simrdma() {
	local kdir=$1 kver hdr out b
	kver=$(cat "$kdir/kver")
	out="$CACHE/simrdma-$kver-$SIMRDMA_HASH"
	if [ -f "$out/simrdma.ko" ]; then echo "$out/simrdma.ko"; return 0; fi
	hdr="linux-headers-$kver"
	# run: what make runs under; src and m: the headers and the module's
	# build folder as make sees them; b: that folder as this script sees it.
	local run=() croot= src m
	case "$kver" in
	7.*) # trixie's compiler and libc, in a chroot of their own
		croot=$(trixie_chroot "$hdr") || return 1
		b="$croot/build" src=/usr/src/$hdr m=/build
		rm -rf "$b"
		mkdir -p "$b"
		# objtool reads /proc: mounted in a mount namespace of the build's own.
		run=(unshare -m sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$croot"
			env PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C)
		;;
	*) # bookworm's compiler on this machine, the headers extracted
		src=$(headers_tree "$hdr") || return 1
		b=$(mktemp -d) m=$b
		;;
	esac
	[ -d "$croot$src" ] || { echo "vm-prepare: $hdr prepared but $croot$src missing" >&2; return 1; }
	cp "$SIMRDMA_SRC/Kbuild" "$SIMRDMA_SRC/Makefile" "$SIMRDMA_SRC/simrdma.c" "$b/"
	log "building simrdma.ko for $kver${croot:+ in $croot}"
	if ! "${run[@]}" make -C "$src" M="$m" modules >"$b/build.log" 2>&1; then
		echo "vm-prepare: FAILED: ${run[*]} make -C $src M=$m modules" >&2
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
# headers_tree HEADERS-PKG -> prints the folder of that package's headers,
# extracted (never installed) under .cache/vm with the two packages its
# relative symlinks and Makefile point at (its -common headers and its
# linux-kbuild); older trees of that kernel are removed. Installing the
# package would install its kernel too (the 6.12 headers depend on their
# linux-image) and build an initramfs for it twice: minutes of a fresh
# machine's first run for a kernel nothing boots here. What the packages
# run (gcc-12, pahole, libelf: their other Depends, kept in the tree's
# .tools) is installed with apt on every call, as a machine may have lost it.
headers_tree() {
	local hdr=$1 ver dir p pkgs=() tools=() common deb
	ver=$(candidate "$hdr") || return 1
	dir="$CACHE/headers-${hdr#linux-headers-}_${ver}"
	if [ ! -f "$dir/.done" ] || [ ! -f "$dir/.tools" ]; then
		for p in $(depends "$hdr"); do
			case $p in
			linux-headers-* | linux-kbuild-*) pkgs+=("$p") ;;
			linux-image-* | linux-base) ;; # a kernel's install, not its build
			*) tools+=("$p") ;;
			esac
		done
		[ ${#pkgs[@]} = 2 ] || { echo "vm-prepare: $hdr depends on ${pkgs[*]:-nothing}, not on one -common and one linux-kbuild" >&2; return 1; }
		for p in "${pkgs[@]}"; do
			mapfile -t -O ${#tools[@]} tools < <(depends "$p")
		done
		deb=$(download "$hdr") || return 1
		# apt_download resolves the version again after a refresh.
		ver=$(dpkg-deb -f "$deb" Version) || return 1
		dir="$CACHE/headers-${hdr#linux-headers-}_${ver}"
		rm -rf "$dir" "$dir.tmp"
		mkdir -p "$dir.tmp"
		dpkg-deb -x "$deb" "$dir.tmp" || return 1
		for p in "${pkgs[@]}"; do
			deb=$(download "$p") || return 1
			dpkg-deb -x "$deb" "$dir.tmp" || return 1
		done
		# The package's Makefile includes the -common one by its absolute
		# path; make -C runs in that folder, so the copy's is relative.
		common=$(sed -n 's|^include /usr/src/\(linux-headers-[^/]*-common\)/Makefile$|\1|p' "$dir.tmp/usr/src/$hdr/Makefile")
		[ -n "$common" ] && [ -f "$dir.tmp/usr/src/$common/Makefile" ] ||
			{ echo "vm-prepare: $hdr's Makefile includes no -common Makefile it came with" >&2; return 1; }
		sed -i "s|^include /usr/src/$common/Makefile\$|include ../$common/Makefile|" "$dir.tmp/usr/src/$hdr/Makefile"
		printf '%s\n' "${tools[@]}" >"$dir.tmp/.tools"
		touch "$dir.tmp/.done"
		mv "$dir.tmp" "$dir"
		for p in "$hdr" "${pkgs[@]}"; do rm -f "$CACHE/debs/${p}_"*.deb; done
		for p in "$CACHE/headers-${hdr#linux-headers-}"_*; do [ "$p" = "$dir" ] || rm -rf "$p"; done
	fi
	mapfile -t tools <"$dir/.tools"
	apt_install "${tools[@]}" || return 1
	echo "$dir/usr/src/$hdr"
}
# depends PKG -> the packages PKG Depends on, one per line (each of a
# Depends' alternatives; virtual packages left out)
depends() {
	apt-cache depends "$1" | awk '$1 ~ /Depends:$/ && $2 !~ /^</ {print $2}'
}
# trixie_chroot HEADERS-PKG -> prints a trixie chroot (minbase, make,
# binutils, gcc-14, the headers package from trixie-backports), made once per headers
# package and kept under .cache/vm; older ones are removed. debootstrap runs
# from bookworm's .deb, extracted, not installed; it and apt in the chroot
# fetch from Debian's archive (packages checked against the host's keyring).
trixie_chroot() {
	local hdr=$1 ver croot dbs t0
	ver=$(APT_CONFIG=$TRIXIE_APT candidate "$hdr")
	croot="$CACHE/build-trixie-${hdr#linux-headers-}_${ver}"
	if [ -f "$croot/.done" ]; then echo "$croot"; return 0; fi
	t0=$(date +%s)
	dbs="$CACHE/debootstrap-$(candidate debootstrap)"
	if [ ! -x "$dbs/usr/sbin/debootstrap" ]; then
		rm -rf "$dbs"
		dpkg-deb -x "$(download debootstrap)" "$dbs" || return 1
	fi
	rm -rf "$croot"
	log "debootstrap --variant=minbase trixie $croot (for $hdr; takes minutes)"
	if ! DEBOOTSTRAP_DIR="$dbs/usr/share/debootstrap" "$dbs/usr/sbin/debootstrap" --variant=minbase \
		--keyring=/usr/share/keyrings/debian-archive-keyring.gpg trixie "$croot" http://deb.debian.org/debian \
		>"$CACHE/debootstrap.log" 2>&1; then
		echo "vm-prepare: FAILED: debootstrap trixie $croot (log: $CACHE/debootstrap.log)" >&2
		tail -n 20 "$CACHE/debootstrap.log" | sed 's/^/vm-prepare:   | /' >&2
		return 1
	fi
	printf 'deb http://deb.debian.org/debian %s main\n' trixie trixie-backports >"$croot/etc/apt/sources.list"
	log "installing make and $hdr=$ver (gcc-14) in the trixie chroot"
	if ! chroot "$croot" env PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C \
		sh -c "apt-get -q update && apt-get -q -y --no-install-recommends install make binutils '$hdr=$ver' && apt-get clean" \
		>"$CACHE/chroot-apt.log" 2>&1; then
		echo "vm-prepare: FAILED: apt-get install $hdr in $croot (log: $CACHE/chroot-apt.log)" >&2
		tail -n 20 "$CACHE/chroot-apt.log" | sed 's/^/vm-prepare:   | /' >&2
		return 1
	fi
	touch "$croot/.done"
	log "trixie build chroot ready in $(($(date +%s) - t0)) s ($(du -sh "$croot" | cut -f1))"
	for t in "$CACHE"/build-trixie-*; do [ "$t" = "$croot" ] || rm -rf "$t"; done
	echo "$croot"
}
SIMRDMA_ENV=
pairs=()
if [ "$VM_SIMRDMA" = 1 ]; then
	[ -n "$K61" ] && pairs+=("6_1:$K61")
	[ -n "$K612" ] && pairs+=("6_12:$K612")
	[ -n "$K73" ] && pairs+=("7_3:$K73")
fi
for pair in "${pairs[@]}"; do
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
for old in "$CACHE"/headers-*; do # headers of kernels this run did not build for
	[ -e "$old" ] && [ "$VM_SIMRDMA" = 1 ] || continue
	keep=0
	for k in $K61 $K612; do [[ "$old" == "$CACHE/headers-$(cat "$k/kver")_"* ]] && keep=1; done
	[ $keep = 1 ] || rm -rf "$old"
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
	# perftest's bandwidth and latency tests: the cluster tier's figures.
	for b in ib_send_bw ib_send_lat ib_write_bw; do
		copy_with_libs "$X/usr/bin/$b" "/usr/bin/$b" "$XLIB"
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

# The lists may have been refreshed during this run: stamp the refreshed ones.
STAMP=$(stamp)
# An earlier run's kernel or module that this run did not ask for stays
# listed while its files exist (make demo after make deps-vm keeps 6.1).
old_env() { [ -f "$CACHE/env" ] && awk -F= -v k="$1" '$1==k {print $2}' "$CACHE/env"; }
if [ -z "$K61" ] && d=$(old_env KERNEL_6_1) && [ -f "$d/.done" ]; then
	K61=$d K61_PKG=$(old_env KERNEL_6_1_PKG)
fi
if [ -z "$K612" ] && d=$(old_env KERNEL_6_12) && [ -f "$d/.done" ]; then
	K612=$d K612_PKG=$(old_env KERNEL_6_12_PKG)
fi
if [ -z "$K73" ] && d=$(old_env KERNEL_7_3) && [ -f "$d/.done" ]; then
	K73=$d K73_PKG=$(old_env KERNEL_7_3_PKG)
fi
for k in 6_1 6_12 7_3; do
	case "$SIMRDMA_ENV" in *"SIMRDMA_$k="*) continue ;; esac
	if f=$(old_env "SIMRDMA_$k") && [ -f "$f" ] && [[ "$f" == *"-$SIMRDMA_HASH/simrdma.ko" ]]; then
		SIMRDMA_ENV+="SIMRDMA_$k=$f"$'\n'
	fi
done
cat >"$CACHE/env.tmp" <<EOF
QEMU=$QEMU
ROOTFS=$ROOTFS
KERNEL_6_1=$K61
KERNEL_6_1_PKG=$K61_PKG
KERNEL_6_12=$K612
KERNEL_6_12_PKG=$K612_PKG
KERNEL_7_3=$K73
KERNEL_7_3_PKG=${K73_PKG:-}
${SIMRDMA_ENV}STAMP=$STAMP
EOF
mv "$CACHE/env.tmp" "$CACHE/env"
cat "$CACHE/env"
