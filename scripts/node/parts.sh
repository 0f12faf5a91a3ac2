#!/usr/bin/env bash
# Builds the real Kubernetes node parts the node tier (integration/node) runs,
# from the Go module proxy, pinned by the wrapper modules beside this script:
#   - kubelet v1.37.2 (scripts/node/kubelet: k8s.io/kubernetes cannot be
#     `go install`ed, its go.mod replaces the k8s.io staging modules with
#     ./staging paths; the wrapper pins each to its published v0.37.2),
#     version stamped, stripped;
#   - Mellanox k8s-rdma-shared-dev-plugin v1.5.3 (scripts/node/rdma-dp: its
#     go.mod has replace lines too), stripped;
#   - containerd v2.4.2 and Debian's runc through scripts/containerd-deps.sh;
#   - Debian's pci.ids (the device plugin names PCI devices from it and exits
#     without it), through scripts/apt.sh.
# Each binary is cached under .cache/node/parts/NAME-VERSION-KEY, KEY being a
# hash of its wrapper module (go.mod, go.sum), the Go version and this script:
# a second run with nothing changed costs only the checks. Builds of other
# keys stay: checkouts that share the cache (worktrees, branches) may pin
# other wrapper modules, and deleting theirs would make each rebuild in
# turn; remove .cache/node/parts to reclaim the space. Cold, the kubelet
# takes about 13 minutes of CPU on 2 cores.
# Prints KEY=VALUE lines (KUBELET, KUBELET_VERSION, RDMA_DP, RDMA_DP_VERSION,
# CONTAINERD_DIR, RUNC) and writes them to .cache/node/parts.env.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE="$ROOT/.cache/node/parts"
export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$CACHE"

KUBELET_VERSION=v1.37.2
RDMA_DP_VERSION=v1.5.3

log() { echo "node-parts: $*" >&2; }
die() { echo "node-parts: ERROR: $*" >&2; exit 1; }

# key MODDIR -> a hash of what decides the binary built from that module
key() {
	cat "$1/go.mod" "$1/go.sum" "$0" | { cat; go env GOVERSION; } | sha256sum | cut -c1-12
}

# build NAME VERSION MODDIR PKG LDFLAGS -> prints the cached binary's path
build() {
	local name=$1 version=$2 mod=$3 pkg=$4 ldflags=$5 dir start
	dir="$CACHE/$name-$version-$(key "$mod")"
	if [ ! -x "$dir/$name" ]; then
		log "building $name $version from $pkg (cached in $dir)"
		start=$(date +%s)
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
			-ldflags "-s -w $ldflags" -o "$dir.tmp/$name" "$pkg") ||
			die "go build $pkg failed (see above)"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		log "$name $version built in $(($(date +%s) - start)) s"
	fi
	echo "$dir/$name"
}

KUBELET=$(build kubelet "$KUBELET_VERSION" scripts/node/kubelet k8s.io/kubernetes/cmd/kubelet \
	"-X k8s.io/component-base/version.gitVersion=$KUBELET_VERSION -X k8s.io/component-base/version.gitTreeState=clean")
RDMA_DP=$(build k8s-rdma-shared-dp "$RDMA_DP_VERSION" scripts/node/rdma-dp \
	github.com/Mellanox/k8s-rdma-shared-dev-plugin/cmd/k8s-rdma-shared-dp "")
./scripts/containerd-deps.sh >&2
APT_PREFIX=node-parts
# shellcheck source=scripts/apt.sh
. scripts/apt.sh
apt_install pci.ids || die "cannot install pci.ids (see above)"
RUNC=$(command -v runc || echo /usr/sbin/runc)
[ -x "$RUNC" ] || die "runc missing after scripts/containerd-deps.sh"

cat >"$CACHE/../parts.env.tmp" <<EOF
KUBELET=$KUBELET
KUBELET_VERSION=$KUBELET_VERSION
RDMA_DP=$RDMA_DP
RDMA_DP_VERSION=$RDMA_DP_VERSION
CONTAINERD_DIR=$ROOT/.tools/containerd2
RUNC=$RUNC
EOF
mv "$CACHE/../parts.env.tmp" "$CACHE/../parts.env"
cat "$CACHE/../parts.env"
