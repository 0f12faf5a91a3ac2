#!/usr/bin/env bash
# Builds the control plane the cluster tier (integration/cluster) runs on the
# host, from the Go module proxy, pinned by wrapper modules:
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
#     v1.37.2 through scripts/node/kubelet, the kubelet's wrapper module
#     (its `tool` lines name them; the build cache is shared with the
#     kubelet's), version stamped, stripped;
#   - etcd v3.7.3 (go.etcd.io/etcd/server/v3) through scripts/cluster/etcd.
# The node parts (kubelet, the RDMA device plugin, containerd, runc) come from
# scripts/node/parts.sh, which this script runs after them.
# Each binary is cached under .cache/cluster/parts/NAME-VERSION-KEY as
# scripts/node/parts.sh does (KEY: a hash of the wrapper module, the Go
# version and this script), with build.txt beside it: the CPU seconds
# (user, system) and peak RSS of its build. Builds of other keys stay, as
# in scripts/node/parts.sh (checkouts sharing the cache may pin others).
# Prints KEY=VALUE lines (ETCD, KUBE_APISERVER, ..., *_VERSION, *_BUILD) and
# writes them, with the node parts', to .cache/cluster/parts.env.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE="$ROOT/.cache/cluster/parts"
export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$CACHE"

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3

log() { echo "cluster-parts: $*" >&2; }
die() { echo "cluster-parts: ERROR: $*" >&2; exit 1; }
# The builds' CPU seconds and peak RSS come from GNU time (Debian's time).
APT_PREFIX=cluster-parts
# shellcheck source=scripts/apt.sh
. scripts/apt.sh
apt_install time || die "cannot install time (see above)"
[ -x /usr/bin/time ] || die "/usr/bin/time missing after installing time"

key() {
	cat "$1/go.mod" "$1/go.sum" "$0" | { cat; go env GOVERSION; } | sha256sum | cut -c1-12
}

# build NAME VERSION MODDIR PKG LDFLAGS -> prints the cached binary's path
build() {
	local name=$1 version=$2 mod=$3 pkg=$4 ldflags=$5 dir
	dir="$CACHE/$name-$version-$(key "$mod")"
	if [ ! -x "$dir/$name" ]; then
		log "building $name $version from $pkg (cached in $dir)"
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly /usr/bin/time -f "user=%U sys=%S maxrss_kb=%M wall=%e" \
			-o "$dir.tmp/build.txt" go build -trimpath -ldflags "-s -w $ldflags" -o "$dir.tmp/$name" "$pkg") ||
			die "go build $pkg failed (see above)"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		log "$name $version built: $(cat "$dir/build.txt")"
	fi
	echo "$dir/$name"
}

STAMP="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitTreeState=clean"
{
	for name in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
		bin=$(build "$name" "$KUBE_VERSION" scripts/node/kubelet "k8s.io/kubernetes/cmd/$name" "$STAMP")
		var=$(echo "$name" | tr a-z- A-Z_)
		echo "$var=$bin"
		echo "${var}_BUILD=$(cat "$(dirname "$bin")/build.txt")"
	done
	echo "KUBE_VERSION=$KUBE_VERSION"
	bin=$(build etcd "$ETCD_VERSION" scripts/cluster/etcd go.etcd.io/etcd/server/v3 "")
	echo "ETCD=$bin"
	echo "ETCD_BUILD=$(cat "$(dirname "$bin")/build.txt")"
	echo "ETCD_VERSION=$ETCD_VERSION"
	./scripts/node/parts.sh
} >"$CACHE/../parts.env.tmp"
mv "$CACHE/../parts.env.tmp" "$CACHE/../parts.env"
cat "$CACHE/../parts.env"
