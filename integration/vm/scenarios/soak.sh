#!/bin/sh
# The bounded soak, sourced by soak-shared.sh (soak-shared boot, soft-RoCE
# rxe0) and soak-exclusive.sh (own boot, simrdma0 on the virtio NIC) with
# MODE set. rc.soak=N on the kernel command line sets the number of pod
# cycles (default 50, make test's short form; `make soak` runs 2000). The plugin
# is the failpoint build (rdma-chain-fp), podSelection "requested" against
# the fake kubelet, IPv6 from host-local on rdma0, SMC-R annotated pods.
# Each cycle is one of:
#   normal  ADD, DEL                                   (about 3 in 4)
#   death   ADD, the pod's netns deleted without DEL   (about 1 in 8)
#   kill    ADD killed (SIGKILL) at a random failpoint, then DEL (1 in 8)
# Meanwhile: STATUS every 5 s, `rdma-chain-ops reconcile --interval 3s`
# running (the only repair for dead netns), and the pod-resources socket
# down for 8 of every 50 cycles (ADD then fails with code 11 and the
# runtime's DEL follows). Every 100 cycles, and at the end, no pod is
# running and the node must equal its snapshot (snapshot.sh: links,
# addresses, routes, RDMA devices, links and GIDs, pnet, leases, records,
# temporary files); the reconcile process's RSS and open fds are sampled
# and must stay flat. RC-INFO: cycles/s, ADD and DEL p50/p99, counts.
. /scenarios/snapshot.sh

SOAKBIN=/opt/cni-soak
DATADIR=/run/rdma-chain-soak
RIPAM=/run/ipam-soak
SOCK=/run/kubelet/soak.sock
CYCLES=$(sed -n 's/.*rc\.soak=\([0-9]*\).*/\1/p' /proc/cmdline)
CYCLES=${CYCLES:-50}
export CAP_ARGS='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'

SUBNET=fd00:96::/64
[ "$MODE" = exclusive ] || SUBNET=fd00:95::/64
setup_mode "$MODE" "${SUBNET%/64}1"
# A kernel without SMC (docs/kernels.md): annotated pods attach without
# SMC-R (onUnsupported warn; the smc scenario asserts that outcome).
SMC_ON=fail
has_smc || SMC_ON=warn
ENTRY="\"mode\":\"$MODE\",\"devices\":$DEVS,\"podSelection\":\"requested\",\"podResourcesSocket\":\"$SOCK\",\
\"resourceNames\":[\"rdma/hca\"],\"dataDir\":\"$DATADIR\",\
\"smcr\":{\"transparent\":\"off\",\"onUnsupported\":\"$SMC_ON\"},\
\"capabilities\":{\"io.kubernetes.cri.pod-annotations\":true},\
\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"$SUBNET\"}]],\"dataDir\":\"$RIPAM\"}"
ND=/etc/cni/net.d-soak
write_conflist $ND 1.1.0 "$ENTRY"
# The primary alone: after a netns death the primary's own clean-up (its
# DEL or GC) releases its lease; rdma-chain's part is reconcile's.
NDPTP=/etc/cni/net.d-soak-ptp
write_ptp_conflist $NDPTP
mkdir -p $SOAKBIN
cp /usr/local/bin/rdma-chain-fp $SOAKBIN/rdma-chain
for p in ptp host-local loopback; do ln -sf /opt/cni/bin/$p $SOAKBIN/$p; done
i=0
{
	printf '{"pods":['
	while [ $i -le "$CYCLES" ]; do
		[ $i -gt 0 ] && printf ','
		printf '{"namespace":"default","name":"s%d","resources":{"rdma/hca":["1"]}}' $i
		i=$((i + 1))
	done
	printf ',{"namespace":"default","name":"trace","resources":{"rdma/hca":["1"]}}]}\n'
} >/run/soak-pods.json

kubelet_up() {
	fakekubelet -socket $SOCK -allocations /run/soak-pods.json >>/tmp/soak-kubelet.log 2>&1 &
	KUBELET=$!
	wait_until 15 test -S $SOCK
}
kubelet_down() { kill "$KUBELET" 2>/dev/null; wait "$KUBELET" 2>/dev/null; rm -f $SOCK; KUBELET=; }
# status_after MARK CODE: a STATUS logged after line MARK of the log exited
# 0 (CODE ok) or not (CODE fail)
status_after() {
	case $2 in
	ok) tail -n +$(($1 + 1)) /run/soak-status | grep -q ' 0$' ;;
	*) tail -n +$(($1 + 1)) /run/soak-status | grep -q ' [1-9][0-9]*$' ;;
	esac
}
# flap down|up N: the pod-resources socket goes away or comes back at cycle
# N; the next STATUS must say so (the loop asks every 5 s)
flap() {
	_mark=$(wc -l </run/soak-status)
	if [ "$1" = down ]; then
		kubelet_down
		step "cycle-$2/status-fails-without-kubelet"
		if wait_until 20 status_after "$_mark" fail; then pass; else fail "no failing STATUS: $(tail -n 3 /run/soak-status | tr '\n' ' ')"; fi
	else
		kubelet_up
		step "cycle-$2/status-recovers"
		if wait_until 20 status_after "$_mark" ok; then pass; else fail "no STATUS ok: $(tail -n 3 /run/soak-status | tr '\n' ' ')"; fi
	fi
}
step kubelet-up
if kubelet_up; then pass; else fail "no socket: $(tail -n 3 /tmp/soak-kubelet.log)"; fi

# sk ACTION POD [VAR=VALUE...]: one CNI call through $SOAKBIN on the
# conflist in $ND; its wall time in 10 ms ticks of /proc/uptime goes to $T.
sk() {
	_act=$1 _pod=$2
	shift 2
	_t0=$(tr -d . </proc/uptime | cut -d' ' -f1)
	CNI_OUT=$(env "$@" NETCONFPATH=$ND CNI_PATH=$SOAKBIN \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$_pod;K8S_POD_UID=uid-$_pod" \
		timeout 60 cnicall "$_act" rdmanet "/var/run/netns/$_pod" 2>&1)
	CNI_RC=$?
	T=$(($(tr -d . </proc/uptime | cut -d' ' -f1) - _t0))
}

# The failpoints of ADD, from one traced ADD and DEL.
ip netns add trace
sk add trace RDMA_CHAIN_FAILPOINT_TRACE=/tmp/soak-trace.add
expect_ok traced-add
sk del trace
expect_ok traced-del
ip netns del trace
ADDFP=$(awk 'NF && !seen[$0]++' /tmp/soak-trace.add | tr '\n' ' ')
NFP=$(echo $ADDFP | wc -w)
check failpoints-found test "$NFP" -gt 0
info "soak $MODE: $CYCLES cycles; ADD failpoints: $ADDFP"

# STATUS every 5 s, into a log of exit codes.
(while :; do
	NETCONFPATH=$ND CNI_PATH=$SOAKBIN cnicall status rdmanet /var/run/netns/none >/dev/null 2>&1
	_rc=$?
	echo "$(cut -d' ' -f1 /proc/uptime) $_rc" >>/run/soak-status
	sleep 5
done) &
STATUS_LOOP=$!
# The repair: rdma-chain-ops reconcile, netns liveness.
rdma-chain-ops reconcile --conflist $ND/rdmanet.conflist --cni-bin-dir $SOAKBIN --interval 3s >>/tmp/soak-reconcile.log 2>&1 &
RECONCILE=$!
check reconcile-running kill -0 $RECONCILE

node_settled
BASE=$(snap)
: >/run/soak-add.t
: >/run/soak-del.t
NORMAL=0 DEATHS=0 KILLS=0 REFUSED=0 FAILED=0 LEAKS=0 RSS0= FD0= RSSMAX=0 FDMAX=0
# rng: a pseudo-random number 0..32767 (awk's rand, seeded per cycle)
rng() { awk -v s="$1" 'BEGIN { srand(s); print int(rand() * 32768) }'; }
sample() { # RSS in kB and open fds of the reconcile process, and the largest seen
	RSS=$(awk '/^VmRSS/ {print $2}' /proc/$RECONCILE/status 2>/dev/null)
	FDS=$(ls /proc/$RECONCILE/fd 2>/dev/null | wc -l)
	[ "${RSS:-0}" -gt "$RSSMAX" ] && RSSMAX=$RSS
	[ "$FDS" -gt "$FDMAX" ] && FDMAX=$FDS
}
# quiet: no record left to repair, so reconcile is idle between passes
no_records() { [ "$(state_count)" -eq 0 ]; }
# baseline: reconcile's RSS and fds once it has warmed up (after 20 cycles)
# and is idle; the checkpoints compare their own idle samples with it
baseline() {
	wait_until 30 no_records
	sample
	RSS0=$RSS FD0=$FDS
	info "soak $MODE: reconcile baseline after $1 cycles: RSS $RSS0 kB, fds $FD0"
}
checkpoint() { # NAME: nothing runs; the node equals BASE, reconcile stays flat
	step "$1/node-clean"
	if settle_equal "$BASE"; then pass; else LEAKS=$((LEAKS + 1)); fail "node differs from before: $DELTA"; node_settled; BASE=$(snap); fi
	[ -n "$RSS0" ] || baseline "$1"
	step "$1/reconcile-flat"
	sample
	info "soak $MODE $1: reconcile idle RSS ${RSS} kB (baseline ${RSS0}, largest seen $RSSMAX), fds $FDS (baseline $FD0, most seen $FDMAX)"
	if ! kill -0 $RECONCILE 2>/dev/null; then
		fail "reconcile exited: $(tail -n 3 /tmp/soak-reconcile.log)"
	elif [ "$FDS" -gt $((FD0 + 2)) ] || [ "$RSS" -gt $((RSS0 * 3 / 2 + 4096)) ]; then
		fail "reconcile grew while idle: RSS $RSS0 -> $RSS kB, fds $FD0 -> $FDS"
	else
		pass
	fi
}

T0=$(cut -d. -f1 /proc/uptime)
n=1
while [ $n -le "$CYCLES" ]; do
	P=s$n
	case $((n % 50)) in 20) flap down $n ;; 28) flap up $n ;; esac
	r=$(rng $n)
	ip netns add $P
	if [ $((r % 8)) -eq 0 ]; then
		F=$(echo $ADDFP | cut -d' ' -f$((r / 8 % NFP + 1)))
		sk add $P RDMA_CHAIN_FAILPOINT="$F"
		KILLS=$((KILLS + 1))
		sk del $P
		[ "$CNI_RC" = 0 ] || { FAILED=$((FAILED + 1)); fail "cycle-$n/del-after-kill" "exit $CNI_RC after a kill at $F: $CNI_OUT"; }
		ip netns del $P
	else
		sk add $P
		ADDRC=$CNI_RC ADDT=$T
		if [ "$ADDRC" != 0 ] && [ -z "$KUBELET" ] && [ "$(cni_code)" = 11 ]; then
			REFUSED=$((REFUSED + 1))
			sk del $P
			ip netns del $P
		elif [ "$ADDRC" != 0 ]; then
			FAILED=$((FAILED + 1))
			fail "cycle-$n/add" "exit $ADDRC: $CNI_OUT"
			sk del $P
			ip netns del $P
		elif [ $((r % 8)) -eq 1 ]; then
			echo "$ADDT" >>/run/soak-add.t
			DEATHS=$((DEATHS + 1))
			ip netns del $P
			ND0=$ND ND=$NDPTP
			sk del $P
			ND=$ND0
			[ "$CNI_RC" = 0 ] || { FAILED=$((FAILED + 1)); fail "cycle-$n/primary-del" "exit $CNI_RC: $CNI_OUT"; }
		else
			echo "$ADDT" >>/run/soak-add.t
			sk del $P
			if [ "$CNI_RC" = 0 ]; then echo "$T" >>/run/soak-del.t; else FAILED=$((FAILED + 1)); fail "cycle-$n/del" "exit $CNI_RC: $CNI_OUT"; fi
			NORMAL=$((NORMAL + 1))
			ip netns del $P
		fi
	fi
	[ $((n % 10)) -eq 0 ] && sample
	[ $n -eq 20 ] && baseline $n
	if [ $((n % 100)) -eq 0 ] || [ $n -eq "$CYCLES" ]; then
		[ -n "$KUBELET" ] || flap up $n
		checkpoint "after-$n"
	fi
	n=$((n + 1))
done
SECS=$(($(cut -d. -f1 /proc/uptime) - T0))
kill $STATUS_LOOP $RECONCILE 2>/dev/null
# pct FILE P: the P-th percentile of FILE's ticks, in ms
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END { if (NR == 0) { print "-"; exit } i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; print a[i] * 10 }'; }
STOK=$(awk '$2 == 0' /run/soak-status | wc -l)
STFAIL=$(awk '$2 != 0' /run/soak-status | wc -l)
info "soak $MODE: $CYCLES cycles in $SECS s ($(awk -v c="$CYCLES" -v s="$SECS" 'BEGIN { printf "%.2f", c / (s ? s : 1) }') cycles/s): $NORMAL normal, $DEATHS netns deaths, $KILLS SIGKILLs, $REFUSED refused while kubelet was down, $FAILED failed calls, $LEAKS leaks; ADD p50 $(pct /run/soak-add.t 50) ms p99 $(pct /run/soak-add.t 99) ms, DEL p50 $(pct /run/soak-del.t 50) ms p99 $(pct /run/soak-del.t 99) ms; STATUS $STOK ok, $STFAIL failed; reconcile RSS $RSS0 -> $RSS kB (largest $RSSMAX), fds $FD0 -> $FDS (most $FDMAX)"
check no-leaks test "$LEAKS" = 0
check no-failed-calls test "$FAILED" = 0
check every-kind-ran test "$DEATHS" -gt 0 -a "$KILLS" -gt 0 -a "$REFUSED" -gt 0
# STATUS fails while the pod-resources socket is down and recovers
check status-followed-kubelet test "$STOK" -gt 0 -a "$STFAIL" -gt 0 -a "$(tail -n 1 /run/soak-status | cut -d' ' -f2)" = 0
[ "$MODE" = exclusive ] && check mode-still-exclusive test "$(netns_mode)" = exclusive
exit 0
