#!/usr/bin/env bash
# Installs what the build and the test tiers need, pinned, into project-local
# folders (.tools/). Debian packages come from apt-get through scripts/apt.sh
# (lists refreshed when a package cannot be resolved). Idempotent: a second
# run with everything present does nothing. DEPS_LINT=0 skips golangci-lint
# and the BPF toolchain (clang, llvm, libbpf-dev) that make lint needs.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"

CNI_VERSION=v1.3.0         # cnitool
PLUGINS_VERSION=v1.9.1     # reference plugins
GOLANGCI_VERSION=v2.15.0   # golangci-lint
PROMETHEUS_VERSION=v0.316.0 # promtool (Prometheus 3.x's module version), make test-alerts
PLUGINS="main/ptp main/bridge main/host-device main/ipvlan main/macvlan main/loopback ipam/host-local meta/tuning"
APT_PACKAGES="iproute2 ca-certificates"
# make lint regenerates the BPF socket hook (scripts/check-generated.sh).
[ "${DEPS_LINT:-1}" = 1 ] && APT_PACKAGES="$APT_PACKAGES clang llvm libbpf-dev"

export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# shellcheck source=scripts/apt.sh
APT_PREFIX=deps
. scripts/apt.sh
# shellcheck disable=SC2086
apt_install $APT_PACKAGES ${EXTRA_APT_PACKAGES:-}

# install_go DIR PKG@VERSION...: installs, in one go install (packages of one
# module at one version, compiled together), those whose binary in DIR is
# missing or stamped with another version.
install_go() {
	local dir=$1 p bin todo=()
	shift
	for p in "$@"; do
		bin=${p%@*}
		bin=${bin##*/}
		[ -x "$dir/$bin" ] && [ "$(cat "$dir/.$bin.version" 2>/dev/null)" = "$p" ] || todo+=("$p")
	done
	[ ${#todo[@]} -gt 0 ] || return 0
	echo "deps: go install ${todo[*]}"
	mkdir -p "$dir"
	GOBIN="$dir" go install "${todo[@]}"
	for p in "${todo[@]}"; do
		bin=${p%@*}
		echo "$p" >"$dir/.${bin##*/}.version"
	done
}

install_go "$TOOLS/bin" "github.com/containernetworking/cni/cnitool@$CNI_VERSION"
plugins=()
for p in $PLUGINS; do plugins+=("github.com/containernetworking/plugins/plugins/$p@$PLUGINS_VERSION"); done
install_go "$TOOLS/cni/bin" "${plugins[@]}"
# promtool checks and tests the alerting rules (make test-alerts). Built
# without the cloud service discoveries (Prometheus's remove_all_sd tag:
# rules need none, and the AWS, Azure and GCE SDKs are most of the build);
# docs/development.md says how long it takes on a cold machine. Only
# make test-alerts asks for it (DEPS_PROMTOOL=1).
if [ "${DEPS_PROMTOOL:-0}" = 1 ]; then
	GOFLAGS="$GOFLAGS -tags=remove_all_sd" install_go "$TOOLS/bin" "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
fi
if [ "${DEPS_LINT:-1}" = 1 ]; then
	CGO_ENABLED=1 install_go "$TOOLS/bin" "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_VERSION"
fi
echo "deps: ok ($TOOLS)"
