#!/bin/sh
# caps (own boot, with a second NIC and rc.simrdma=eth0): what this kernel
# offers the plugin, as "RC-CAP KEY VALUE" lines that integration/vm/vm_test.go
# compares with the kernel's row of the table in docs/kernels.md. kcaps
# (integration/vm/guest/kcaps) prints the SMC and netns-local keys; this
# script probes the RDMA netns operations with rdma(8), first thing in the
# boot (the mode can only change while no other netns exists):
#   rdma_mode_set  yes|no  `rdma system set netns exclusive`, then `shared` again
#   move_simrdma   yes|no  exclusive mode: `rdma dev set simrdma0 netns X`
#                          (a driver with disassociate_ucontext)
#   move_rxe       yes|no  the same for soft-RoCE's rxe0
# A device moved to X comes back to init_net when X is deleted.
#   transparent  tcp2smc|socket_hook|none|no_smc
#                the mechanism smcr.transparent auto picks (kcaps, from the
#                same pkg/smc.Detect), printed only when the plugin's
#                STATUS log, `rdma-chain-ops inspect --json` and the metric
#                rdma_chain_smc_transparent_info all name it; otherwise a
#                "mismatch:..." value no table row has.
. /scenarios/lib.sh

cap() { echo "RC-CAP $1 $2"; }
yes_no() { if "$@" >/tmp/caps.out 2>&1; then echo yes; else echo no; fi; }

grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf
step kcaps
if out=$(kcaps 2>&1); then pass; else fail "kcaps: $out"; fi
echo "$out"
KT=$(echo "$out" | sed -n 's/^RC-INFO transparent //p')

step mode-exclusive
mode_set=$(yes_no rdma system set netns exclusive)
info "rdma system set netns exclusive: $mode_set $(cat /tmp/caps.out); mode now $(netns_mode)"
pass
check rxe0 setup_rxe
check simrdma0-registered sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:'"
# move DEV: yes when the kernel moves DEV into netns capns (and it shows there)
move() {
	rdma dev set "$1" netns capns && ip netns exec capns /usr/sbin/rdma dev | grep -q ": $1:"
}
ip netns add capns
for d in simrdma0 rxe0; do
	step move-$d
	v=no
	if [ "$(netns_mode)" = exclusive ]; then v=$(yes_no move $d); fi
	info "rdma dev set $d netns capns: $v $(cat /tmp/caps.out)"
	eval "move_$d=\$v"
	pass
done
ip netns del capns
for d in simrdma0 rxe0; do
	eval "v=\$move_$d"
	[ "$v" = yes ] || continue
	check back-$d wait_until 30 sh -c "/usr/sbin/rdma dev | grep -q ': $d:'"
done
# Back to shared: EBUSY until the kernel has freed capns.
step mode-shared
if [ "$mode_set" = yes ] && ! wait_until 30 rdma system set netns shared; then
	mode_set=no
fi
info "rdma system set netns shared: mode now $(netns_mode)"
[ "$mode_set" = no ] || [ "$(netns_mode)" = shared ] || mode_set=no
pass
# STATUS (its log line), inspect and the metrics on this kernel.
NETDIR=/etc/cni/net.d-caps
DATADIR=/run/rdma-chain-caps
write_conflist $NETDIR 1.1.0 "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
# status_took: the plugin's own STATUS duration in $CNI_OUT
status_took() { echo "$CNI_OUT" | sed -n 's/.*verb=STATUS .*duration=\([^ ]*\) .*/\1/p'; }
cni cnicall status caps
expect_ok status
ST=$(echo "$CNI_OUT" | sed -n 's/.*msg="SMC-R: .* mechanism=\([a-z_0-9]*\) .*/\1/p' | head -n1)
D1=$(status_took)
# The second STATUS reuses the first one's probe (kept in the state directory).
cni cnicall status caps
expect_ok status-again
ST2=$(echo "$CNI_OUT" | sed -n 's/.*msg="SMC-R: .* mechanism=\([a-z_0-9]*\) .*/\1/p' | head -n1)
info "STATUS took $D1 probing SMC, $(status_took) with the kept probe"
[ "$ST2" = "$ST" ] || ST="$ST/$ST2"
print_info inspect rdma-chain-ops inspect --data-dir $DATADIR
IT=$(rdma-chain-ops inspect --data-dir $DATADIR --json | sed -n 's/^ *"transparent": "\([a-z_0-9]*\)",*$/\1/p' | head -n1)
NETCONFPATH=$NETDIR rdma-chain-ops reconcile --cni-bin-dir /opt/cni/bin --interval 10m \
	--metrics-bind-address 127.0.0.1:9742 >/run/reconcile-caps.log 2>&1 &
RPID=$!
step metrics-served
if wait_until 30 promscrape http://127.0.0.1:9742/metrics; then pass; else fail "no metrics: $(cat /run/reconcile-caps.log)"; fi
MT=$(promscrape http://127.0.0.1:9742/metrics | sed -n 's/^rdma_chain_smc_transparent_info{mechanism="\([a-z_0-9]*\)".*/\1/p')
promscrape http://127.0.0.1:9742/metrics | grep smc_transparent | sed 's/^/  | /'
# The daemon holds the socket hook's program loaded exactly where auto
# uses the hook, so that no SMC-R pod's ADD loads it; elsewhere it says
# why not. The hook binary's release then detaches it (no pod listed).
step smc-hook-held
HOLD_LOG='msg="holding the SMC socket hook loaded: .* bpffsDir=/sys/fs/bpf/rdma-chain'
if wait_until 60 grep -qE "$HOLD_LOG|msg=\"SMC socket hook not held\" bpffsDir=/sys/fs/bpf/rdma-chain" /run/reconcile-caps.log; then
	held_metric() { promscrape http://127.0.0.1:9742/metrics | sed -n 's/^rdma_chain_smc_socket_hook_held \([0-9]*\)$/\1/p'; }
	# A scrape's result is reused for 2 s: the held one may come later.
	HELD=$(held_metric)
	i=0
	while [ "$MT" = socket_hook ] && [ "$HELD" != 1 ] && [ $i -lt 30 ]; do
		sleep 1
		HELD=$(held_metric)
		i=$((i + 1))
	done
	info "reconcile: $(grep 'SMC socket hook' /run/reconcile-caps.log); rdma_chain_smc_socket_hook_held ${HELD:-absent}"
	if [ "$MT" = socket_hook ]; then
		if grep -q "$HOLD_LOG" /run/reconcile-caps.log && [ "$HELD" = 1 ] && [ -e /sys/fs/bpf/rdma-chain/smc_link ]; then pass; else fail "hook not held where auto uses it"; fi
	elif grep -q "$HOLD_LOG" /run/reconcile-caps.log || [ -e /sys/fs/bpf/rdma-chain ] || [ "${HELD:-0}" != 0 ]; then
		fail "hook held where auto uses $MT"
	else
		pass
	fi
else
	fail "no hold decision: $(cat /run/reconcile-caps.log)"
fi
kill $RPID
wait $RPID 2>/dev/null
if [ "$MT" = socket_hook ]; then
	check smc-hook-held-after-exit test -e /sys/fs/bpf/rdma-chain/smc_link
	check smc-hook-release rdma-chain-smc-hook release /sys/fs/bpf/rdma-chain
	check smc-hook-detached sh -c '! test -e /sys/fs/bpf/rdma-chain'
fi
info "transparent SMC: kcaps $KT, STATUS $ST, inspect $IT, metrics $MT"
if [ -n "$KT" ] && [ "$ST" = "$KT" ] && [ "$IT" = "$KT" ] && [ "$MT" = "$KT" ]; then
	cap transparent "$KT"
else
	cap transparent "mismatch:kcaps=$KT,status=$ST,inspect=$IT,metrics=$MT"
fi
cap rdma_mode_set "$mode_set"
cap move_simrdma "$move_simrdma0"
cap move_rxe "$move_rxe0"
exit 0
