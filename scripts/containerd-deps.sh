#!/usr/bin/env bash
# Installs what the containerd tier (integration/containerd, build tag
# containerd) needs beyond `make deps`: Debian's containerd (ships ctr and
# containerd-shim-runc-v2) and runc. Idempotent: installs only what is missing.
set -euo pipefail

APT_PACKAGES="containerd runc"

need_apt=()
for p in $APT_PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -eq 0 ]; then
	echo "containerd-deps: ok (already installed)"
	exit 0
fi
echo "containerd-deps: apt-get install ${need_apt[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
echo "containerd-deps: ok"
