#!/usr/bin/env bash
# Builds a release's node image from git history, as its `make image` built
# it, so the same bytes and the same digest as the release's image:
#
#   scripts/release-image.sh VERSION OUT [ARCHES]
#
# VERSION is a row of docs/releases.md, which names its commit; the commit
# is taken from the clone's history (git archive into a temporary tree), so
# a clone without tags builds it too. Each architecture of ARCHES (default
# "amd64 arm64", make image's) gets the release's four binaries, stamped
# with VERSION, and the release's own internal/mkimage packs them with the
# commit's hash and date into the OCI archive OUT. Prints the index's
# digest, which docs/releases.md gives for the default ARCHES, or with one
# architecture its image's. The binaries are built as make build builds
# them (-trimpath, -buildvcs=false), with the Go docs/releases.md's Images
# table names for VERSION when it has a row (GOTOOLCHAIN: the go command
# fetches that toolchain from the module proxy when it is not the local
# one), else with the local Go, whose version a new row then names.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PATH="/usr/local/go/bin:$PATH"
die() { echo "release-image: ERROR: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 VERSION OUT [ARCHES]"
VERSION=$1
OUT=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
ARCHES=${3:-amd64 arm64}
commit=$(awk -F'|' -v v="$VERSION" '{gsub(/ /, "", $2); gsub(/ /, "", $3)} $2 == v && length($3) == 40 {print $3}' "$ROOT/docs/releases.md")
[ -n "$commit" ] || die "docs/releases.md has no row for $VERSION"
git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null || die "$VERSION's commit $commit is not in this clone's history"
created=$(git -C "$ROOT" log -1 --format=%cI "$commit")
# The Images table's row: "| VERSION (goX.Y.Z) | ...".
row=$(grep -F "| $VERSION (" "$ROOT/docs/releases.md" || true)
if [ -n "$row" ]; then
	gover=$(printf '%s\n' "$row" | grep -oE '\(go[0-9]+\.[0-9]+(\.[0-9]+)?([a-z]+[0-9]+)?\)' | tr -d '()' | head -n 1)
	[ -n "$gover" ] || die "docs/releases.md's Images row of $VERSION names no Go version: $row"
	export GOTOOLCHAIN=$gover
fi
src=$(mktemp -d /tmp/rc-release-XXXXXX)
trap 'rm -rf "$src"' EXIT
git -C "$ROOT" archive --format=tar "$commit" | tar -x -C "$src"
binaries="rdma-chain rdma-chain-smc-hook rdma-chain-ops rdma-chain-dra"
platforms=()
for a in $ARCHES; do
	for p in ./plugins/meta/rdma-chain ./cmd/rdma-chain-smc-hook ./cmd/rdma-chain-ops ./cmd/rdma-chain-dra; do
		(cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=$a go build -trimpath -buildvcs=false -ldflags "-s -w -X main.buildVersion=$VERSION" -o "bin/linux-$a/" "$p")
	done
	platforms+=(--platform "linux/$a=$src/bin/linux-$a")
done
# shellcheck disable=SC2086 # binaries is a list of names
CGO_ENABLED=0 go -C "$src/internal/mkimage" run -trimpath . --out "$OUT" --name localhost/rdma-chain --tag dev --tag "$VERSION" \
	--version "$VERSION" --revision "$commit" --created "$created" --entrypoint /rdma-chain-ops "${platforms[@]}" $binaries >&2
tar -xOf "$OUT" index.json | grep -oE '"digest": ?"sha256:[0-9a-f]{64}"' | head -n 1 | grep -oE 'sha256:[0-9a-f]{64}'
