#!/usr/bin/env bash
# The README's set-up on a machine whose apt lists are stale, reproduced
# without touching the machine's own lists: a copy of /var/lib/apt/lists
# without the security suite (where Debian bookworm's 6.12 kernels and their
# meta package linux-image-6.12-amd64 live, as on a machine whose lists
# predate them), an empty dpkg status (a fresh machine has installed nothing
# the project needs), and apt pointed at them through APT_CONFIG.
#
# 1. Control, scripts/apt.sh with APT_REFRESH=0: resolving the newest
#    linux-image-6.12.N+debNN-amd64 (as scripts/vm/prepare.sh does),
#    downloading linux-image-6.12-amd64 (1.5 kB) and installing it
#    (simulated: apt-get -s) must all FAIL, or the copy is not stale and
#    this test shows nothing.
# 2. The same calls with apt.sh's refresh: the copied lists are refreshed
#    once and every call succeeds; the resolved kernel is the one the meta
#    package depends on.
# The machine's /var/lib/apt/lists is checked unchanged at the end.
# Root; about 10-20 s (an apt-get update of the copy fetches the security
# suite's index, about 1 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "test-stale-lists: $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
if [ "$(id -u)" != 0 ]; then
	[ "${CI:-}" = true ] && fail "CI=true and not root: this check cannot run"
	say "SKIP: needs root"
	exit 0
fi
start=$(date +%s%N)
LISTS=/var/lib/apt/lists
KERNEL_ERE='linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64'
PKG=linux-image-6.12-amd64
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# A machine with no lists, or stale ones, first gets what the set-up would
# give it: refreshed lists (the copy needs a security suite to leave out).
if ! ls "$LISTS" | grep -q -- '-security_.*_Packages'; then
	say "the machine's lists have no security suite yet: refreshing them as the set-up would"
	(APT_PREFIX=test-stale-lists && . scripts/apt.sh && apt_refresh) || fail "apt-get update failed"
fi
before=$(cd "$LISTS" && find . -maxdepth 1 -type f -printf '%f %s %T@\n' | sort | sha256sum)

# ---- the stale copy -----------------------------------------------------------
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
: >"$tmp/status"
n=0
for f in "$LISTS"/*; do
	[ -f "$f" ] || continue
	case "$f" in *-security_* | */lock) continue ;; esac
	cp -p "$f" "$tmp/lists/"
	n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "no apt lists in $LISTS to copy (run apt-get update once)"
ls "$LISTS" | grep -q -- '-security_.*_Packages' ||
	fail "the machine's lists have no security suite to leave out"
cat >"$tmp/apt.conf" <<EOF
Dir::State::Lists "$tmp/lists/";
Dir::State::status "$tmp/status";
Dir::Cache "$tmp/cache/";
APT::Sandbox::User "root";
EOF
export APT_CONFIG="$tmp/apt.conf"
say "stale copy of the lists in $tmp/lists: no security suite"

# ---- the project's calls ------------------------------------------------------
# Each runs in its own bash with a fresh apt.sh, as a set-up script would.
calls() { # label -> runs the three calls, prints one verdict line per call
	# shellcheck disable=SC2016
	bash -c '
		. scripts/apt.sh
		if k=$(apt_newest "$1"); then echo "resolve ok $k"; else echo "resolve failed"; fi
		if d=$(apt_download "$2" "$3"); then echo "download ok ${d##*/}"; else echo "download failed"; fi
		if APT_SIMULATE=1 apt_install "$3"; then echo "install ok"; else echo "install failed"; fi
	' calls "$KERNEL_ERE" "$tmp/debs" "$PKG" 2>"$tmp/$1.log"
}

control=$(APT_REFRESH=0 APT_PREFIX=control calls control)
echo "$control" | sed 's/^/  control (no refresh): /' >&2
[ "$(echo "$control" | grep -c 'failed$')" = 3 ] ||
	fail "with refresh disabled every call should fail on the stale copy; got: $(echo "$control" | tr '\n' ';')"
grep -q 'lists lack something' "$tmp/control.log" && fail "the control refreshed although APT_REFRESH=0"
grep -q 'ERROR: this command failed' "$tmp/control.log" || fail "the control's failures printed no error report"

fixed=$(APT_PREFIX=setup calls setup) || true
echo "$fixed" | sed 's/^/  with refresh: /' >&2
if [ "$(echo "$fixed" | grep -c ' ok')" != 3 ]; then
	sed 's/^/    /' "$tmp/setup.log" >&2
	fail "after a refresh every call should succeed"
fi
grep -q 'lists lack something' "$tmp/setup.log" || fail "the calls succeeded without a refresh: the copy was not stale"
kernel=$(echo "$fixed" | awk '/^resolve ok/ {print $3}')
echo "$kernel" | grep -qE "^$KERNEL_ERE\$" || fail "resolved $kernel, not a $KERNEL_ERE"
apt-cache depends "$PKG" | grep -qF "Depends: $kernel" ||
	fail "resolved $kernel, but $PKG depends on $(apt-cache depends "$PKG" | grep Depends | tr -s ' ')"

after=$(cd "$LISTS" && find . -maxdepth 1 -type f -printf '%f %s %T@\n' | sort | sha256sum)
[ "$before" = "$after" ] || fail "the machine's $LISTS changed during the test"
say "ok: stale lists refreshed by apt.sh, $(grep -c 'lists lack something' "$tmp/setup.log") refresh(es), machine's lists untouched, $((($(date +%s%N) - start) / 1000000)) ms"
