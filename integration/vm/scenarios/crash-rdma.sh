#!/bin/sh
# crash-rdma (own boot, with a second NIC and rc.simrdma=eth0): crash safety
# of exclusive mode on the kernel's real RDMA core. simrdma0 (bound to the
# virtio-net NIC eth0) is moved with eth0 into an annotated (SMC-R) pod,
# chained after ptp+host-local, with host-local IPv6 on rdma0. The plugin is
# rdma-chain built with -tags failpoint (guest binary rdma-chain-fp),
# installed as rdma-chain in a CNI_PATH of its own (/opt/cni-fp).
#   1. one traced ADD and DEL learn the failpoints (RDMA_CHAIN_FAILPOINT_TRACE)
#   2. every ADD failpoint: ADD killed there (SIGKILL), something left to
#      undo, then DEL (cniVersion 1.0.0) / GC (1.1.0: `cnitool gc`, then
#      ptp's DEL) and the node equals its snapshot from before
#   3. every DEL failpoint: ADD ok, DEL killed there, then DEL again / GC
# The snapshot is init_net's links (name, flags, MTU, MAC), addresses, routes
# of every table, eth0's view, rdma dev, rdma link, simrdma0's GIDs, the SMC
# pnet table, the host-local leases (primary and rdma0) and the plugin's
# records dir. RC-INFO: failpoints discovered, runs, leaks.
. /scenarios/lib.sh

FPBIN=/opt/cni-fp
DATADIR=/run/rdma-chain-crash
RIPAM=/run/ipam-crash-rdma
export CAP_ARGS='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'

step switch-to-exclusive
if out=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then pass; else fail "$out"; fi
check simrdma0-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"
check nic-setup setup_nic
# rdma-chain in $FPBIN is a wrapper that records the real binary's exit
# status (libcni's error drops it): 137 is death by SIGKILL.
install_fp() {
	mkdir -p $FPBIN && cp /usr/local/bin/rdma-chain-fp $FPBIN/rdma-chain-fp &&
		printf '#!/bin/sh\n%s/rdma-chain-fp "$@"\nrc=$?\necho "$CNI_COMMAND $rc" >>/run/fp-exit\nexit $rc\n' $FPBIN >$FPBIN/rdma-chain &&
		chmod 0755 $FPBIN/rdma-chain &&
		for p in ptp host-local loopback; do ln -sf /opt/cni/bin/$p $FPBIN/$p || return 1; done
}
check failpoint-plugin-installed install_fp

# conflists: DEL runs at 1.0.0, GC runs at 1.1.0; ptp-only at 1.1.0 (the
# primary's DEL after a GC). smcr.transparent off: no BPF hook on 6.1. On a
# kernel without SMC (docs/kernels.md) the annotated pods attach without
# SMC-R (onUnsupported warn) and there are no SMC failpoints; the smc
# scenario asserts that outcome.
SMC_ON=fail SMC_FP="add-smc-host-entry add-smc-pod-entry del-smc-released"
has_smc || SMC_ON=warn SMC_FP=
ENTRY="\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\
\"smcr\":{\"transparent\":\"off\",\"onUnsupported\":\"$SMC_ON\"},\
\"capabilities\":{\"io.kubernetes.cri.pod-annotations\":true},\
\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"fd00:99::/64\"}]],\"dataDir\":\"$RIPAM\"}"
ND10=/etc/cni/net.d-crash-1.0.0
ND11=/etc/cni/net.d-crash-1.1.0
NDPTP=/etc/cni/net.d-crash-ptp
write_conflist $ND10 1.0.0 "$ENTRY"
write_conflist $ND11 1.1.0 "$ENTRY"
write_ptp_conflist $NDPTP
info "conflist 1.0.0: $(tr -d '\n' <$ND10/rdmanet.conflist)"

# fp TOOL ACTION POD NETDIR [VAR=VALUE...]: a CNI call through $FPBIN (as
# lib.sh's cni, whose CNI_PATH is fixed); the variables go to the plugin.
fp() {
	_tool=$1 _act=$2 _pod=$3 _nd=$4
	shift 4
	: >/run/fp-exit
	CNI_OUT=$(env "$@" NETCONFPATH=$_nd CNI_PATH=$FPBIN \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$_pod;K8S_POD_UID=uid-$_pod" \
		timeout 60 "$_tool" "$_act" rdmanet "/var/run/netns/$_pod" 2>&1)
	CNI_RC=$?
	echo "  \$ $* $_tool $_act rdmanet $_pod ($_nd) -> exit $CNI_RC; rdma-chain exits: $(tr '\n' ' ' </run/fp-exit)"
	[ -n "$CNI_OUT" ] && echo "$CNI_OUT" | grep -v '^ *[][{}"]' | cut -c1-300 | sed 's/^/  | /'
	return 0
}

# The node snapshot (snap, owned, settle_equal, settled, delta) of
# snapshot.sh, over $DATADIR, $RIPAM and ptp's /run/ipam.
. /scenarios/snapshot.sh
uniq_lines() { awk 'NF && !seen[$0]++' "$1" 2>/dev/null | tr '\n' ' '; }

# ---- 1. discovery: one traced ADD and DEL ----
settled
BEFORE0=$(snap)
ip netns add trace
fp cnicall add trace $ND10 RDMA_CHAIN_FAILPOINT_TRACE=/tmp/trace.add
expect_ok traced-add
if has_smc; then
	check traced-add-smc-pod-entry sh -c "smcctl pnet /var/run/netns/trace | grep -q 'eth=eth0'"
else
	check traced-add-no-smc sh -c "! grep -q '\"smc\"' $DATADIR/attachments/*"
fi
fp cnicall del trace $ND10 RDMA_CHAIN_FAILPOINT_TRACE=/tmp/trace.del
expect_ok traced-del
ip netns del trace
ADDFP=$(uniq_lines /tmp/trace.add)
DELFP=$(uniq_lines /tmp/trace.del)
info "ADD failpoints: $ADDFP"
info "DEL failpoints: $DELFP"
step failpoints-discovered
MISSING=
for w in add-rdma-moved add-netdev-moved add-ipam-lease-taken del-rdma-returned del-netdev-restored \
	del-ipam-lease-released $SMC_FP; do
	case " $ADDFP $DELFP " in *" $w "*) ;; *) MISSING="$MISSING $w" ;; esac
done
if [ -z "$MISSING" ]; then pass; else fail "ADD [$ADDFP] DEL [$DELFP] lack:$MISSING"; fi
# The first cycle creates the state and IPAM folders; from here on the node
# must come back exactly.
step normal-cycle-restores
settled
BASE=$(snap)
if [ "$(echo "$BEFORE0" | grep -v '^file\|^entry')" = "$(echo "$BASE" | grep -v '^file\|^entry')" ]; then
	pass
else
	fail "$(delta "$BEFORE0" "$BASE")"
fi
info "baseline: $(echo "$BASE" | tr '\n' ';' | cut -c1-1500)"

RUNS=0 LEAKS=0 N=0 LEAKED= DELTA=
# Every failpoint runs in both matrices: a case that may not run could hide
# a leak. A host too slow for all of them fails the boot's time limit.
T0=$(cut -d. -f1 /proc/uptime)
# after RUNNAME POD MODE: DEL (1.0.0 chain) or GC (1.1.0 cnitool gc, then
# the primary's DEL), then the node equals BASE
after() {
	_r=$1 _p=$2 _m=$3
	if [ "$_m" = DEL ]; then
		fp cnicall del "$_p" $ND10
		expect_ok "$_r/del-ok"
	else
		fp cnitool gc "$_p" $ND11
		expect_ok "$_r/gc-ok"
		fp cnicall del "$_p" $NDPTP
		expect_ok "$_r/ptp-del-ok"
	fi
	RUNS=$((RUNS + 1))
	step "$_r/node-restored"
	if settle_equal "$BASE"; then
		pass
	else
		LEAKS=$((LEAKS + 1))
		LEAKED="$LEAKED $_r"
		fail "node differs from before: $DELTA"
	fi
	ip netns del "$_p" 2>/dev/null
	# after a leak, the next run starts from what this one left
	[ -z "$DELTA" ] || { settled; BASE=$(snap); DELTA=; }
}
# killed RUNNAME FP: the last call died of SIGKILL at FP
killed() {
	step "$1/killed"
	_ex=$(tail -n 1 /run/fp-exit)
	case "$CNI_RC $_ex $CNI_OUT" in
	[1-9]*" 137 "*"failpoint $2: SIGKILL"*) pass ;;
	*) fail "not killed at $2 (cnicall exit $CNI_RC, rdma-chain [$_ex]): $(echo "$CNI_OUT" | tail -n 3)" ;;
	esac
}

for M in DEL GC; do
	ND=$ND10
	[ $M = GC ] && ND=$ND11
	for F in $ADDFP; do
		N=$((N + 1))
		R="add-$F-then-$M"
		P=c$N
		ip netns add $P
		O1=$(owned $P)
		fp cnicall add $P $ND RDMA_CHAIN_FAILPOINT=$F
		killed "$R" "$F"
		step "$R/left-something"
		O2=$(owned $P)
		if [ "$O1" != "$O2" ]; then pass; else fail "ADD killed at $F changed nothing rdma-chain owns"; fi
		info "$R: left $(delta "$O1" "$O2")"
		if [ $M = DEL ]; then # the comparison sees a crash nobody cleaned up
			step "$R/snapshot-sees-the-crash"
			if [ "$(snap)" != "$BASE" ]; then pass; else fail "the node snapshot equals the baseline right after the crash"; fi
		fi
		after "$R" $P $M
	done
	for F in $DELFP; do
		N=$((N + 1))
		R="del-$F-then-$M"
		P=c$N
		ip netns add $P
		fp cnicall add $P $ND
		expect_ok "$R/add-ok"
		fp cnicall del $P $ND RDMA_CHAIN_FAILPOINT=$F
		killed "$R" "$F"
		after "$R" $P $M
	done
done
NA=$(echo $ADDFP | wc -w)
ND=$(echo $DELFP | wc -w)
info "crash-rdma: failpoints discovered: $((NA + ND)) (ADD $NA, DEL $ND); runs: $RUNS; leaks: $LEAKS${LEAKED:+ (}${LEAKED# }${LEAKED:+)}; $(($(cut -d. -f1 /proc/uptime) - T0)) s"
step every-failpoint-ran-twice
if [ "$RUNS" -eq $((2 * (NA + ND))) ]; then pass; else fail "$RUNS runs for $((NA + ND)) failpoints in two matrices"; fi
check mode-still-exclusive test "$(netns_mode)" = exclusive
exit 0
