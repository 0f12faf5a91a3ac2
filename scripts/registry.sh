#!/usr/bin/env bash
# Builds distribution's registry (github.com/distribution/distribution/v3,
# cmd/registry, REGISTRY_VERSION) from the Go module proxy into
# .tools/registry-VERSION/registry, static and stripped, for make test-push,
# which runs it on the loopback and pushes make image's index to it. A
# second run finds the binary and builds nothing. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
REGISTRY_VERSION=v3.1.2
dir="$PWD/.tools/registry-$REGISTRY_VERSION"
if [ ! -x "$dir/registry" ]; then
	echo "registry: building github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION into $dir" >&2
	start=$(date +%s)
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	GOBIN="$dir.tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags '-s -w' \
		"github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" ||
		{ echo "registry: ERROR: go install failed (see above); it needs the Go module proxy" >&2; exit 1; }
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	echo "registry: built in $(($(date +%s) - start)) s" >&2
fi
echo "$dir/registry"
