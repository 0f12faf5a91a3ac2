#!/bin/sh
# Helpers the scenarios source: markers and go_checks, which runs a
# scenario's Go test in the guest; and for the shell that is left (the
# opt-in demo, the node and cluster tiers' guests): real ip/rdma, the
# soft-RoCE set-up, conflists and CNI calls.
#
# Markers (parsed by integration/vm/vm_test.go):
#   RC-STEP <name>            a check starts
#   RC-PASS <name>            it held
#   RC-FAIL <name>: <reason>  it did not (also recorded in /run/rc-fails)
# Names are "$SCEN/$PFX<check>" (PFX e.g. "v1.0.0/").

# Debian's busybox runs its own applets before PATH; functions win over both.
ip() { /usr/sbin/ip "$@"; }
rdma() { /usr/sbin/rdma "$@"; }

SCEN=${SCEN:-$(basename "$0" .sh)}
PFX=${PFX:-}
CUR=

step() { CUR="$1"; echo "RC-STEP $SCEN/$PFX$1"; }
pass() { echo "RC-PASS $SCEN/$PFX${1:-$CUR}"; }
fail() { # [name] reason
	if [ $# -ge 2 ]; then _fn=$1; shift; else _fn=$CUR; fi
	echo "RC-FAIL $SCEN/$PFX$_fn: $(echo "$*" | tr '\n' ' ' | cut -c1-600)"
	echo "$SCEN/$PFX$_fn" >>/run/rc-fails
}
# check NAME CMD...: one step, passes when CMD succeeds; the reason shows its output.
check() {
	_n=$1; shift
	step "$_n"
	if _o=$("$@" 2>&1); then pass "$_n"; else fail "$_n" "[$*] $_o"; fi
}
info() { echo "RC-INFO $*"; }
# show CMD...: run and print a command and its output, indented.
show() {
	echo "  \$ $*"
	"$@" 2>&1 | sed 's/^/  | /'
}

# wait_until SECONDS CMD...: poll CMD every 0.1 s until it succeeds; status 1
# if it never does. TCG under load is slow: waits are generous and bounded.
wait_until() {
	_tenths=$(($1 * 10)); shift
	_i=0
	until "$@" >/dev/null 2>&1; do
		[ $_i -ge $_tenths ] && return 1
		sleep 0.1
		_i=$((_i + 1))
	done
}
# rping_listening ADDR: an rping server's cm_id listens on ADDR (any netns)
rping_listening() { rdma resource show cm_id 2>/dev/null | grep 'state LISTEN' | grep -qF "src-addr $1"; }
# gid_row GID NDEV [DEV]: the gid_rows line of GID (expanded form) on NDEV; fails if none
gid_row() { gid_rows "${3:-rxe0}" | grep " $1 $2\$"; }
# v6_gid_rows: GID rows of fd00:77:: addresses on pod interfaces (not the node's fd00:77::1)
v6_gid_rows() { gid_rows | grep ' fd00:0077:' | grep -v ' veth0$'; }
# no_output CMD...: CMD prints nothing
no_output() { [ -z "$("$@")" ]; }

# setup_rxe: veth0/veth1 up, 192.168.77.1/24 on veth0, rxe0 on veth0 (once per boot).
setup_rxe() {
	[ -d /sys/class/infiniband/rxe0 ] && return 0 # an earlier scenario of this boot did it
	ip link add veth0 type veth peer name veth1 || return 1
	ip link set veth0 up && ip link set veth1 up || return 1
	ip addr add 192.168.77.1/24 dev veth0 || return 1
	rdma link add rxe0 type rxe netdev veth0 || return 1
	wait_until 10 test -d /sys/class/infiniband/rxe0 # rxe registers asynchronously on some kernels
}

# netns mode as `rdma system` prints it: shared|exclusive
netns_mode() { rdma system show | sed -n 's/.*netns \([a-z]*\).*/\1/p'; }

# write_conflist DIR CNIVERSION RDMA-CHAIN-JSON-FIELDS: a conflist "rdmanet"
# of ptp + host-local and rdma-chain, in DIR/rdmanet.conflist.
write_conflist() {
	mkdir -p "$1"
	cat >"$1/rdmanet.conflist" <<EOF
{"cniVersion":"$2","name":"rdmanet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]],"dataDir":"/run/ipam"}},
 {"type":"rdma-chain",$3}
]}
EOF
}

# cni TOOL ACTION POD: runs cnitool against $NETDIR for pod POD
# (netns /var/run/netns/POD) with the CNI_ARGS a kubelet/containerd passes
# (IgnoreUnknown=1, or ptp rejects the K8S_* keys). Sets CNI_RC and CNI_OUT (stdout+stderr) and
# prints both to the console.
cni() {
	_tool=$1 _act=$2 _pod=$3
	CNI_OUT=$(NETCONFPATH=$NETDIR CNI_PATH=/opt/cni/bin \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$_pod;K8S_POD_UID=uid-$_pod" \
		timeout 60 "$_tool" "$_act" rdmanet "/var/run/netns/$_pod" 2>&1)
	CNI_RC=$?
	echo "  \$ $_tool $_act rdmanet $_pod  (NETCONFPATH=$NETDIR) -> exit $CNI_RC"
	[ -n "$CNI_OUT" ] && echo "$CNI_OUT" | sed 's/^/  | /'
	return 0
}

# expect_ok NAME: the last cni call succeeded
expect_ok() {
	step "$1"
	if [ "$CNI_RC" = 0 ]; then pass; else fail "exit $CNI_RC: $CNI_OUT"; fi
}
# pod_links POD: names of the links in POD's netns, space-separated
pod_links() { ip -n "$1" -o link show | sed 's/^[0-9]*: \([^:@]*\).*/\1/' | tr '\n' ' ' | sed 's/ $//'; }

# has_rdma0 POD: pod netns has an interface rdma0
has_rdma0() { ip -n "$1" link show rdma0 >/dev/null 2>&1; }

# state_files: attachment records under $DATADIR/attachments
state_files() { ls "$DATADIR/attachments" 2>/dev/null; }
state_count() { state_files | wc -l; }

# --- result JSON and IPv6 helpers (demo) ---

# compact_result: the result JSON in $CNI_OUT (log lines before it dropped), without blanks and newlines
compact_result() { echo "$CNI_OUT" | sed -n '/^{/,$p' | tr -d ' \t\n'; }

# result_iface_index NAME: index of interface NAME in the result's
# "interfaces" array in $CNI_OUT, or empty.
result_iface_index() {
	compact_result | sed -n 's/.*"interfaces":\[\([^]]*\)\].*/\1/p' | sed 's/},{/}\n{/g' |
		awk -v n="\"name\":\"$1\"" 'index($0, n) {print NR - 1; exit}'
}

# result_ip_entry PREFIX: the first "ips" object of $CNI_OUT whose address
# starts with PREFIX, compacted, or empty.
result_ip_entry() {
	compact_result | sed -n 's/.*"ips":\[\([^]]*\)\].*/\1/p' | sed 's/},{/}\n{/g' |
		grep "\"address\":\"$1" | head -n1
}

# result_ip PREFIX: the address (without prefix length) of that entry
result_ip() { result_ip_entry "$1" | sed -n 's/.*"address":"\([^"/]*\)\/.*/\1/p'; }

# pod_ip6 POD PREFIX: the address (without prefix length) on rdma0 in POD
# that starts with PREFIX, or empty. The result lists it only with
# reportIPs: by default the pod itself is where it is read.
pod_ip6() { ip -n "$1" -6 -o addr show dev rdma0 2>/dev/null | awk '{print $4}' | sed 's|/.*||' | grep "^$2" | head -n1; }

# expand6 ADDR: the IPv6 address in the 8 x 4 hex digit form the GID table uses
expand6() {
	echo "$1" | awk '{
		a = tolower($0); l = a; r = ""; nl = 0; nr = 0
		if ((i = index(a, "::")) > 0) { l = substr(a, 1, i - 1); r = substr(a, i + 2) }
		if (l != "") nl = split(l, L, ":")
		if (r != "") nr = split(r, R, ":")
		k = 0
		for (i = 1; i <= nl; i++) g[++k] = L[i]
		for (i = 0; i < 8 - nl - nr; i++) g[++k] = "0"
		for (i = 1; i <= nr; i++) g[++k] = R[i]
		out = ""
		for (i = 1; i <= 8; i++) out = out (i > 1 ? ":" : "") substr("0000" g[i], length(g[i]) + 1)
		print out }'
}

# gid_rows [DEV]: "N GID NDEV" for every non-zero GID of DEV (rxe0) port 1
# (one grep: the table has hundreds of entries and a fork per file is slow
# under TCG)
gid_rows() {
	_gd=${1:-rxe0}
	grep -H -v '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/$_gd/ports/1/gids/* 2>/dev/null |
		sed 's|.*/gids/\([0-9]*\):|\1 |' | sort -n | while read -r n g; do
		echo "$n $g $(cat /sys/class/infiniband/$_gd/ports/1/gid_attrs/ndevs/$n 2>/dev/null)"
	done
}

# counters: sent_pkts and rcvd_pkts of DEV (rxe0) port 1
rxe_sent() { cat /sys/class/infiniband/${1:-rxe0}/ports/1/hw_counters/sent_pkts; }
rxe_rcvd() { cat /sys/class/infiniband/${1:-rxe0}/ports/1/hw_counters/rcvd_pkts; }

# rping_done STATUS OUTPUT COUNT: whether an rping client (-v -C COUNT) that
# exited with STATUS and printed OUTPUT completed COUNT verified pings. Its
# COUNT "ping data" lines are that proof; the exit status alone is not:
# rping's cm_thread (rdma-core 44, the guests' Debian) polls the CM event
# channel the main thread closes on teardown, and when it loses that race it
# exits 255 after "rdma_get_cm_event: Bad file descriptor", pings all done.
# Only that exact teardown is read as done; any other failure is not.
rping_done() {
	[ "$(echo "$2" | grep -c 'ping data')" = "$3" ] || return 1
	[ "$1" = 0 ] && return 0
	[ "$1" = 255 ] && echo "$2" | grep -qx 'rdma_get_cm_event: Bad file descriptor'
}

# setup_nic: the simrdma boots' NIC (eth0) as a node would have it: MTU, up,
# IPv4 + IPv6, a gateway route and a route in another table.
setup_nic() {
	ip link set eth0 mtu 1400 up &&
		ip addr add 192.168.88.1/24 dev eth0 &&
		ip addr add fd00:88::1/64 dev eth0 nodad &&
		ip route add 10.88.0.0/16 via 192.168.88.254 dev eth0 &&
		ip route add 10.89.0.0/16 dev eth0 table 100
}

# subtest_log OUTPUT NAME: the last log lines go test -v printed for
# subtest NAME in OUTPUT (a failure's t.Error or t.Fatal comes last), on
# one line, or where to look when it printed none: a failed check's
# RC-FAIL line says why, even where only the tier's summary is kept.
subtest_log() {
	_sl=$(echo "$1" | awk -v t="$2" '/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
		/^ *--- / { cur = ""; next }
		cur == t && sub(/^ +[A-Za-z0-9_.-]+\.go:[0-9]+: /, "") { print; next }
		cur == t && /^        / { sub(/^ +/, ""); print }' | tail -n 3 | tr '\n' ' ' | cut -c1-500)
	echo "${_sl:-see the test log above}"
}

# go_checks BINARY TEST TIMEOUT: runs the Go test TEST of BINARY (a go test
# -c build in /usr/local/bin, e.g. crash.test) in this guest, prints its
# output, and turns go test's result lines into checks: each subtest is a
# check named by its path below TEST (a skipped one fails; a subtest's log
# is in the output above), and a last check, "go-test", passes only when
# the binary ran, exited 0 and reported "--- PASS: TEST": a case that does
# not run, or a skip of TEST itself, fails the scenario. TEST's own log
# lines (not its subtests') become RC-INFO lines.
go_checks() {
	_bin=$1 _test=$2 _to=$3
	_log=/run/go-checks-$_bin.log
	# streamed to the console as it runs; its exit status as the last line
	(RC_VM_GUEST=1 "/usr/local/bin/$_bin" -test.v -test.count=1 -test.run "^$_test\$" -test.timeout "$_to" 2>&1
		echo "GO-CHECKS-EXIT $?") | tee "$_log" | sed 's/^/  | /'
	_rc=$(sed -n 's/^GO-CHECKS-EXIT //p' "$_log")
	_out=$(cat "$_log")
	echo "$_out" | sed -En "s/^ *--- (PASS|FAIL|SKIP): $_test\/([^ ]*) .*/\1 \2/p" | while read -r _res _name; do
		step "$_name"
		if [ "$_res" = PASS ]; then pass; else fail "$_res: $(subtest_log "$_out" "$_test/$_name")"; fi
	done
	echo "$_out" | awk -v t="$_test" '/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
		cur == t && sub(/^    [a-z0-9_]+_test\.go:[0-9]+: /, "") { print }' | while IFS= read -r _l; do info "$SCEN: $_l"; done
	step go-test
	if [ "$_rc" = 0 ] && echo "$_out" | grep -q "^--- PASS: $_test "; then
		pass
	else
		fail "$_bin exit $_rc: $(echo "$_out" | tail -n 5)"
	fi
}
