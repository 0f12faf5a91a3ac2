#!/usr/bin/env bash
# Installs what the containerd tier (integration/containerd, build tag
# containerd) needs beyond `make deps`:
#   - Debian's containerd 1.6 (with ctr and containerd-shim-runc-v2) and runc,
#     through scripts/apt.sh;
#   - containerd v2.4.2 (containerd, containerd-shim-runc-v2, ctr), built
#     static from the Go module proxy into .tools/containerd2/ (about 2
#     minutes on 2 cores, once; stamped with the version like deps.sh's tools).
# Idempotent: a second run with everything present only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
CONTAINERD2_VERSION=v2.4.2
CONTAINERD2_DIR="$TOOLS/containerd2"

export PATH="/usr/local/go/bin:$PATH"

# shellcheck source=scripts/apt.sh
APT_PREFIX=containerd-deps
. scripts/apt.sh
apt_install containerd runc

mod=github.com/containerd/containerd/v2
want="$mod@$CONTAINERD2_VERSION containerd containerd-shim-runc-v2 ctr"
stamp="$CONTAINERD2_DIR/.containerd.version"
have=1
for b in containerd containerd-shim-runc-v2 ctr; do [ -x "$CONTAINERD2_DIR/$b" ] || have=0; done
if [ $have = 0 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	echo "containerd-deps: go install $mod/cmd/{containerd,containerd-shim-runc-v2,ctr}@$CONTAINERD2_VERSION (about 2 minutes, once)"
	start=$(date +%s)
	mkdir -p "$CONTAINERD2_DIR"
	rm -f "$stamp"
	CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$CONTAINERD2_DIR" go install \
		"$mod/cmd/containerd@$CONTAINERD2_VERSION" \
		"$mod/cmd/containerd-shim-runc-v2@$CONTAINERD2_VERSION" \
		"$mod/cmd/ctr@$CONTAINERD2_VERSION"
	echo "$want" >"$stamp"
	echo "containerd-deps: containerd $CONTAINERD2_VERSION built in $(($(date +%s) - start))s"
fi
echo "containerd-deps: ok (Debian containerd $(dpkg-query -W -f='${Version}' containerd), containerd $CONTAINERD2_VERSION in $CONTAINERD2_DIR)"
