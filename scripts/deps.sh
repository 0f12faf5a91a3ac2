#!/usr/bin/env bash
# Installs what the build and the test tiers need, pinned, into project-local
# folders (.tools/). Debian packages come from apt-get through scripts/apt.sh
# (lists refreshed when a package cannot be resolved). Idempotent: a second
# run with everything present does nothing. DEPS_LINT=0 skips golangci-lint.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"

CNI_VERSION=v1.3.0         # cnitool
PLUGINS_VERSION=v1.9.1     # reference plugins
GOLANGCI_VERSION=v2.15.0   # golangci-lint
PLUGINS="main/ptp main/bridge main/host-device main/ipvlan main/macvlan main/loopback ipam/host-local meta/tuning"
APT_PACKAGES="iproute2 ca-certificates"

export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# shellcheck source=scripts/apt.sh
APT_PREFIX=deps
. scripts/apt.sh
# shellcheck disable=SC2086
apt_install $APT_PACKAGES ${EXTRA_APT_PACKAGES:-}

install_go() { # dir pkg@version binary
	local dir=$1 pkg=$2 bin=$3 stamp
	stamp="$dir/.$bin.version"
	if [ -x "$dir/$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg" ]; then return 0; fi
	echo "deps: go install $pkg"
	mkdir -p "$dir"
	GOBIN="$dir" go install "$pkg"
	echo "$pkg" >"$stamp"
}

install_go "$TOOLS/bin" "github.com/containernetworking/cni/cnitool@$CNI_VERSION" cnitool
for p in $PLUGINS; do
	install_go "$TOOLS/cni/bin" "github.com/containernetworking/plugins/plugins/$p@$PLUGINS_VERSION" "${p##*/}"
done
if [ "${DEPS_LINT:-1}" = 1 ]; then
	CGO_ENABLED=1 install_go "$TOOLS/bin" "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_VERSION" golangci-lint
fi
echo "deps: ok ($TOOLS)"
