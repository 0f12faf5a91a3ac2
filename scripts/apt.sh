# shellcheck shell=bash
# Shared apt helpers for the project's set-up scripts. Source it:
#   . "$(dirname "$0")/apt.sh"        (from scripts/)
#
# API (every function returns non-zero on failure; none exits the caller):
#   apt_installed PKG          true when dpkg has PKG installed
#   apt_install PKG...         installs those of PKG... not installed yet
#                              (no recommends, non-interactive)
#   apt_candidate PKG          prints PKG's candidate version
#   apt_resolve WHAT CMD [ARG...]
#                              runs CMD (a shell function or command that
#                              prints one package name or version from
#                              apt-cache); prints its output; WHAT names it
#                              in messages
#   apt_newest ERE             prints the newest (sort -V) package name the
#                              lists offer that matches the extended regular
#                              expression ERE as a whole
#   apt_download DIR PKG       downloads PKG's candidate .deb into DIR
#                              (reuses one already there) and prints its path
#   apt_refresh                apt-get update, at most once per shell process
#   apt_suite_config DIR SUITE...
#                              writes DIR/apt.conf, an apt of its own (own
#                              sources, lists, cache, an empty dpkg status)
#                              that sees only Debian's SUITE... (main),
#                              fetches their lists when it has none and
#                              prints the file's path. Under APT_CONFIG=that
#                              path apt_newest, apt_candidate and
#                              apt_download resolve and download from those
#                              suites (a refresh updates those lists); the
#                              host's apt and what it installs stay as they
#                              are
#
# Every apt call waits up to APT_LOCK_TIMEOUT seconds (default 120) for a
# dpkg/apt lock another apt process holds. When a package cannot be
# resolved, installed or downloaded (lists missing, stale, or lacking it),
# the lists are refreshed with apt-get update and the step is retried once.
# A step that still fails prints the failing command, the last 20 lines of
# its output and what to do.
#
# Environment:
#   APT_PREFIX        prefix of the messages [apt]
#   APT_LOCK_TIMEOUT  seconds to wait for a held lock [120]
#   APT_REFRESH=0     never refresh the lists (the stale-lists test's control)
#   APT_CONFIG        apt's own: an extra config file, e.g. one setting
#                     Dir::State::Lists to a copy of the lists
#
# A refresh in a $(...) subshell is not seen by the parent shell; at worst
# the parent refreshes once more. Sourcing sets an EXIT trap that removes the
# helpers' temporary output file.

APT_REFRESHED=${APT_REFRESHED:-0}
APT_OUT=$(mktemp "${TMPDIR:-/tmp}/apt-out.XXXXXX")
trap 'rm -f "$APT_OUT"' EXIT

apt__say() { echo "${APT_PREFIX:-apt}: $*" >&2; }

apt__opts() { # options every apt-get call gets
	printf '%s\n' -o "DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT:-120}" -o Dpkg::Use-Pty=0
}

# apt__run CMD...: runs CMD with its output in APT_OUT (a file); returns its status.
apt__run() {
	DEBIAN_FRONTEND=noninteractive "$@" >"$APT_OUT" 2>&1
}

# apt__fail CMD...: reports a failed step with its output's last lines.
apt__fail() {
	local rc=$1
	shift
	apt__say "ERROR: this command failed (exit $rc):"
	echo "    $*" >&2
	if [ "${APT_SHOW_OUT:-1}" = 1 ] && [ -s "$APT_OUT" ]; then
		apt__say "its last lines of output:"
		tail -n 20 "$APT_OUT" | sed 's/^/    | /' >&2
	fi
	apt__say "what to do: check that the mirrors in /etc/apt/sources.list and /etc/apt/sources.list.d/ are reachable, run 'apt-get update' and fix what it reports (a held lock: wait for the other apt/dpkg process to finish), then run the make target again"
}

# apt__try CMD...: runs CMD; on failure refreshes the lists once and runs it
# again; reports the failure if it still fails.
apt__try() {
	local rc=0
	apt__run "$@" || rc=$?
	if [ $rc -ne 0 ] && apt_refresh; then
		apt__say "retrying after the refresh: $*"
		rc=0
		apt__run "$@" || rc=$?
	fi
	[ $rc -eq 0 ] || apt__fail $rc "$@"
	return $rc
}

apt_refresh() {
	[ "${APT_REFRESH:-1}" != 0 ] || return 1
	[ "$APT_REFRESHED" != 1 ] || return 1
	APT_REFRESHED=1
	apt__say "package lists lack something this step needs: apt-get update"
	local rc=0 opts
	mapfile -t opts < <(apt__opts)
	apt__run apt-get "${opts[@]}" update || rc=$?
	# apt-get update exits 0 with "W: Failed to fetch" when a source is down.
	if [ $rc -ne 0 ] || grep -q '^[WE]: .*\(Failed to fetch\|failed to download\)' "$APT_OUT"; then
		apt__fail "$rc" apt-get "${opts[@]}" update
		[ $rc -ne 0 ] || apt__say "(continuing with what the reachable sources gave)"
	fi
	return 0
}

apt_installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

apt_install() {
	local need=() p opts
	for p in "$@"; do apt_installed "$p" || need+=("$p"); done
	[ ${#need[@]} -gt 0 ] || return 0
	mapfile -t opts < <(apt__opts)
	apt__say "apt-get install ${need[*]}"
	apt__try apt-get "${opts[@]}" install -y -q --no-install-recommends ${APT_SIMULATE:+-s} "${need[@]}"
}

# apt__candidate PKG: prints the candidate version, nothing if there is none.
apt__candidate() {
	apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2; exit}'
}

apt_candidate() {
	apt_resolve "candidate version of $1" apt__candidate "$1"
}

apt_resolve() {
	local what=$1 out
	shift
	out=$("$@") || true
	if [ -z "$out" ] && apt_refresh; then
		out=$("$@") || true
	fi
	if [ -z "$out" ]; then
		APT_SHOW_OUT=0 apt__fail 1 "$@ (found no $what in the package lists)"
		return 1
	fi
	echo "$out"
}

# apt__newest ERE: the newest package name matching ERE, nothing if none.
apt__newest() {
	apt-cache search --names-only "^($1)\$" 2>/dev/null | awk '{print $1}' | grep -E "^($1)\$" | sort -V | tail -n 1
}

apt_newest() {
	apt_resolve "package matching $1" apt__newest "$1"
}

apt_download() {
	local dir=$1 pkg=$2 ver f opts
	ver=$(apt_candidate "$pkg") || return 1
	f=$(apt__deb "$dir" "$pkg" "$ver")
	if [ -z "$f" ]; then
		mapfile -t opts < <(apt__opts)
		apt__say "apt-get download $pkg=$ver"
		if ! (cd "$dir" && apt__run apt-get "${opts[@]}" download -q -o APT::Sandbox::User=root "$pkg=$ver"); then
			# The mirror may have dropped that version: refresh, resolve again.
			apt_refresh || { apt__fail 1 apt-get download "$pkg=$ver"; return 1; }
			ver=$(apt_candidate "$pkg") || return 1
			(cd "$dir" && apt__try apt-get "${opts[@]}" download -q -o APT::Sandbox::User=root "$pkg=$ver") || return 1
		fi
		f=$(apt__deb "$dir" "$pkg" "$ver")
	fi
	[ -n "$f" ] || { apt__say "ERROR: apt-get download $pkg=$ver left no .deb in $dir"; return 1; }
	echo "$f"
}

apt__deb() { # dir pkg ver -> path of the .deb if present
	local f
	for f in "$1/${2}_${3//:/%3a}_"*.deb; do
		[ -f "$f" ] && { echo "$f"; return 0; }
	done
	return 0
}

# apt_suite_config DIR SUITE...: see the API above. Debian's archive, checked
# against the archive keyring (which names bookworm's successors too).
apt_suite_config() {
	local dir=$1 s
	shift
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts" "$dir/sources.list.d" "$dir/preferences.d"
	[ -f "$dir/status" ] || : >"$dir/status"
	for s in "$@"; do
		echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $s main"
	done >"$dir/sources.list.new"
	{
		echo "Dir::Etc::SourceList \"$dir/sources.list\";"
		echo "Dir::Etc::SourceParts \"$dir/sources.list.d\";"
		echo "Dir::Etc::Parts \"$dir/parts\";"
		echo "Dir::Etc::Preferences \"$dir/preferences\";"
		echo "Dir::Etc::PreferencesParts \"$dir/preferences.d\";"
		echo "Dir::State::Lists \"$dir/lists\";"
		echo "Dir::State::status \"$dir/status\";"
		echo "Dir::Cache \"$dir/cache\";"
		echo 'APT::Architecture "amd64";'
		echo 'APT::Architectures { "amd64"; };'
		echo 'Acquire::Languages "none";'
	} >"$dir/apt.conf"
	# Other suites than last time: fetch their lists afresh.
	cmp -s "$dir/sources.list.new" "$dir/sources.list" 2>/dev/null || rm -f "$dir/lists/"*_Packages "$dir/lists/"*Release
	mv "$dir/sources.list.new" "$dir/sources.list"
	if ! compgen -G "$dir/lists/*_Packages" >/dev/null; then
		local rc=0 opts
		mapfile -t opts < <(apt__opts)
		apt__say "apt-get update of $* (own lists in $dir, for downloads only)"
		APT_CONFIG="$dir/apt.conf" apt__run apt-get "${opts[@]}" -o APT::Sandbox::User=root update || rc=$?
		if [ $rc -ne 0 ] || grep -q '^[WE]: ' "$APT_OUT"; then
			apt__fail "$rc" env APT_CONFIG="$dir/apt.conf" apt-get update
			return 1
		fi
	fi
	echo "$dir/apt.conf"
}
